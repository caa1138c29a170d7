//! The block index: which node holds which cached prompt blocks, in which slot.
//!
//! Nodes report every change to their slots' caches as [`KvEvent`]s. The
//! index replays them exactly: per (node, model, slot) it keeps the slot's
//! chain of block hashes, and from each hash it maps to every (node, slot)
//! whose chain contains it. Events that do not fit what the index knows (a
//! removal that names blocks the slot does not end with) make the index
//! forget that slot rather than keep an entry that may be wrong.
//!
//! What it keeps per node is capped by the models the node described (see
//! [`limits`]): blocks past a slot's context, for slots or models the node
//! does not have, are left out with a warning.

use super::holders::{Holder, Holders};
use super::NodeKey;
use std::collections::HashMap;
use superfluid_proto::{BlockHash, KvEvent, KvUpdate, ModelDescription};

mod limits;

use limits::NodeLimits;
#[cfg(test)]
pub(crate) use limits::{MAX_CHAIN_BLOCKS, MAX_SLOTS};

/// How much of a prompt one node holds cached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Match {
    /// The node.
    pub node: NodeKey,
    /// The slot holding the longest prefix (the lowest such slot on a tie).
    pub slot: u32,
    /// The prefix length in blocks.
    pub blocks: usize,
}

/// What the index knows about one node.
#[derive(Debug)]
struct NodeChains {
    /// The node's dense number (holders name nodes by it).
    dense: u32,
    /// Per model, per slot, the slot's chain of block hashes. Empty chains
    /// and models without chains are removed.
    models: HashMap<String, HashMap<u32, Vec<BlockHash>>>,
    /// Total length of the node's chains.
    blocks: usize,
}

/// Exact index from block hash to the (node, slot)s that hold it.
#[derive(Debug, Default)]
pub struct BlockIndex {
    holders: HashMap<BlockHash, Holders>,
    nodes: HashMap<NodeKey, NodeChains>,
    /// Node key by dense number; `None` for free numbers.
    keys: Vec<Option<NodeKey>>,
    free: Vec<u32>,
    /// Number of (hash, holder) entries.
    entries: usize,
    /// What is kept at most per node; nodes not here are held to the
    /// absolute limits.
    limits: HashMap<NodeKey, NodeLimits>,
}

impl BlockIndex {
    /// An empty index.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of (hash, holder) entries: the total length of every slot's
    /// chain on every node.
    pub fn len(&self) -> usize {
        self.entries
    }

    /// Whether no node holds any block.
    pub fn is_empty(&self) -> bool {
        self.entries == 0
    }

    /// Number of blocks `node` holds, over all its models and slots.
    pub fn node_blocks(&self, node: NodeKey) -> usize {
        self.nodes.get(&node).map_or(0, |n| n.blocks)
    }

    /// Replays one node's cache changes. Never panics, whatever the events.
    pub fn apply(&mut self, node: NodeKey, update: &KvUpdate) {
        for event in &update.events {
            match event {
                KvEvent::Stored { slot, blocks } => self.store(node, &update.model, *slot, blocks),
                KvEvent::Removed { slot, blocks } => {
                    self.remove_tail(node, &update.model, *slot, blocks);
                }
                KvEvent::Cleared { slot } => self.clear(node, &update.model, *slot),
            }
        }
    }

    /// Keeps no more for `node` than `models` (as its hello described them)
    /// can hold. Blocks it holds already are not trimmed; describe a node
    /// before applying its events.
    pub fn describe_node(&mut self, node: NodeKey, models: &[ModelDescription]) {
        self.limits.insert(node, NodeLimits::described(models));
    }

    /// Drops every block of `node`, and its limits.
    pub fn remove_node(&mut self, node: NodeKey) {
        self.limits.remove(&node);
        let Some(record) = self.nodes.remove(&node) else {
            return;
        };
        for (_, slots) in record.models {
            for (slot, chain) in slots {
                self.unlist(record.dense, slot, &chain);
            }
        }
        if let Some(key) = self.keys.get_mut(record.dense as usize) {
            *key = None;
        }
        self.free.push(record.dense);
    }

    /// Fills `out` (cleared first) with one [`Match`] per node that holds at
    /// least the first of `hashes` (a prompt's block hashes, in order): the
    /// longest prefix that node holds in one slot, and that slot.
    ///
    /// A block hash stands for its whole prefix, so holding hash `i` means
    /// holding blocks `0..=i`, and nobody can hold a block past the first
    /// one nobody holds. The walk looks up each hash until then, and then
    /// reads holder lists from the deepest level back, only where the
    /// number of holders changes, so a prefix shared by many slots costs one
    /// pass over its holders rather than one per block.
    pub fn matches(&self, hashes: &[BlockHash], out: &mut Vec<Match>) {
        out.clear();
        let mut levels: Vec<&[Holder]> = Vec::new();
        for hash in hashes {
            match self.holders.get(hash) {
                Some(h) => levels.push(h.as_slice()),
                None => break,
            }
        }
        let mut seen = vec![false; self.keys.len()];
        let mut above = 0;
        for (i, level) in levels.iter().enumerate().rev() {
            if level.len() == above {
                continue;
            }
            above = level.len();
            for &(dense, slot) in *level {
                let Some(flag) = seen.get_mut(dense as usize) else {
                    continue;
                };
                if *flag {
                    continue;
                }
                *flag = true;
                if let Some(Some(node)) = self.keys.get(dense as usize) {
                    out.push(Match {
                        node: *node,
                        slot,
                        blocks: i + 1,
                    });
                }
            }
        }
    }

    /// Every (node, slot) holding `hash`, one entry per occurrence.
    #[cfg(test)]
    pub(crate) fn holders_of(&self, hash: BlockHash) -> Vec<(NodeKey, u32)> {
        let Some(h) = self.holders.get(&hash) else {
            return Vec::new();
        };
        let mut v: Vec<_> = h
            .as_slice()
            .iter()
            .filter_map(|&(d, s)| self.keys.get(d as usize).copied().flatten().map(|k| (k, s)))
            .collect();
        v.sort_unstable();
        v
    }

    /// Number of distinct hashes with at least one holder.
    #[cfg(test)]
    pub(crate) fn distinct_hashes(&self) -> usize {
        self.holders.len()
    }

    fn store(&mut self, node: NodeKey, model: &str, slot: u32, blocks: &[BlockHash]) {
        if blocks.is_empty() {
            return;
        }
        let kept = self.room(node, model, slot, blocks.len());
        if kept == 0 {
            return;
        }
        let blocks = &blocks[..kept];
        let dense = self.dense(node);
        let Some(record) = self.nodes.get_mut(&node) else {
            return;
        };
        let slots = match record.models.get_mut(model) {
            Some(slots) => slots,
            None => record.models.entry(model.to_owned()).or_default(),
        };
        slots.entry(slot).or_default().extend_from_slice(blocks);
        record.blocks += blocks.len();
        self.entries += blocks.len();
        for &hash in blocks {
            match self.holders.get_mut(&hash) {
                Some(h) => h.insert((dense, slot)),
                None => {
                    self.holders.insert(hash, Holders::One((dense, slot)));
                }
            }
        }
    }

    /// How many of `offered` blocks stored to (node, model, slot) are
    /// kept; a refusal is logged, as a warning the first time per node.
    fn room(&mut self, node: NodeKey, model: &str, slot: u32, offered: usize) -> usize {
        let record = self.nodes.get(&node);
        let node_blocks = record.map_or(0, |r| r.blocks);
        let chain_len = record
            .and_then(|r| r.models.get(model))
            .and_then(|slots| slots.get(&slot))
            .map_or(0, Vec::len);
        let limits = self.limits.entry(node).or_insert_with(NodeLimits::absolute);
        let (kept, why) = match limits.room(model, slot, chain_len, node_blocks, offered) {
            Ok(kept) if kept == offered => return kept,
            Ok(kept) => (
                kept,
                format!("only {kept} of {offered} blocks fit its limits"),
            ),
            Err(refusal) => (0, refusal.to_string()),
        };
        if limits.first_refusal() {
            tracing::warn!(node, model, slot, %why, "leaving out cached blocks a node reported beyond what it described; the node may be broken");
        } else {
            tracing::debug!(node, model, slot, %why, "leaving out cached blocks beyond the node's limits");
        }
        kept
    }

    fn remove_tail(&mut self, node: NodeKey, model: &str, slot: u32, blocks: &[BlockHash]) {
        if blocks.is_empty() {
            return;
        }
        let Some(chain) = self.chain_mut(node, model, slot) else {
            return;
        };
        if !chain.ends_with(blocks) {
            tracing::debug!(
                node,
                model,
                slot,
                "removed blocks are not the end of the slot's chain; forgetting the slot"
            );
            self.clear(node, model, slot);
            return;
        }
        let keep = chain.len() - blocks.len();
        let dropped = chain.split_off(keep);
        self.after_shrink(node, model, slot, &dropped);
    }

    fn clear(&mut self, node: NodeKey, model: &str, slot: u32) {
        let Some(chain) = self.chain_mut(node, model, slot) else {
            return;
        };
        let dropped = std::mem::take(chain);
        self.after_shrink(node, model, slot, &dropped);
    }

    fn chain_mut(&mut self, node: NodeKey, model: &str, slot: u32) -> Option<&mut Vec<BlockHash>> {
        self.nodes
            .get_mut(&node)?
            .models
            .get_mut(model)?
            .get_mut(&slot)
    }

    /// Bookkeeping after `dropped` left the chain of (node, model, slot):
    /// holder entries, counters, and empty chains and records.
    fn after_shrink(&mut self, node: NodeKey, model: &str, slot: u32, dropped: &[BlockHash]) {
        let Some(record) = self.nodes.get_mut(&node) else {
            return;
        };
        let dense = record.dense;
        record.blocks -= dropped.len();
        if let Some(slots) = record.models.get_mut(model) {
            if slots.get(&slot).is_some_and(Vec::is_empty) {
                slots.remove(&slot);
            }
            if slots.is_empty() {
                record.models.remove(model);
            }
        }
        if record.models.is_empty() {
            self.nodes.remove(&node);
            if let Some(key) = self.keys.get_mut(dense as usize) {
                *key = None;
            }
            self.free.push(dense);
        }
        self.unlist(dense, slot, dropped);
    }

    /// Removes one holder entry (dense, slot) for each of `hashes`.
    fn unlist(&mut self, dense: u32, slot: u32, hashes: &[BlockHash]) {
        for hash in hashes {
            let Some(h) = self.holders.get_mut(hash) else {
                continue;
            };
            let Some(empty) = h.remove((dense, slot)) else {
                continue;
            };
            self.entries -= 1;
            if empty {
                self.holders.remove(hash);
            }
        }
    }

    /// The node's dense number, making a record for it if it has none.
    fn dense(&mut self, node: NodeKey) -> u32 {
        if let Some(record) = self.nodes.get(&node) {
            return record.dense;
        }
        let dense = match self.free.pop() {
            Some(d) => {
                if let Some(key) = self.keys.get_mut(d as usize) {
                    *key = Some(node);
                }
                d
            }
            None => {
                self.keys.push(Some(node));
                (self.keys.len() - 1) as u32
            }
        };
        self.nodes.insert(
            node,
            NodeChains {
                dense,
                models: HashMap::new(),
                blocks: 0,
            },
        );
        dense
    }
}
