//! The block index against a naive model on random event sequences.

use super::index::MAX_SLOTS;
use super::index_tests::{matches, removed, stored, update};
use super::{BlockIndex, Match, NodeKey};
use std::collections::HashMap;
use superfluid_proto::{BlockHash, KvEvent, KvUpdate};

/// A tiny deterministic generator for the randomized test.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The naive model: every slot's chain, and matches by comparing chains.
#[derive(Default)]
struct Naive {
    chains: HashMap<(NodeKey, String, u32), Vec<BlockHash>>,
}

impl Naive {
    fn apply(&mut self, node: NodeKey, update: &KvUpdate) {
        for event in &update.events {
            match event {
                KvEvent::Stored { slot, blocks } if *slot < MAX_SLOTS => {
                    let key = (node, update.model.clone(), *slot);
                    self.chains.entry(key).or_default().extend(blocks);
                }
                KvEvent::Stored { .. } => {}
                KvEvent::Removed { slot, blocks } => {
                    let key = (node, update.model.clone(), *slot);
                    let chain = self.chains.entry(key).or_default();
                    if chain.ends_with(blocks) {
                        chain.truncate(chain.len() - blocks.len());
                    } else {
                        chain.clear();
                    }
                }
                KvEvent::Cleared { slot } => {
                    self.chains.remove(&(node, update.model.clone(), *slot));
                }
            }
        }
    }

    fn len(&self) -> usize {
        self.chains.values().map(Vec::len).sum()
    }

    fn holders_of(&self, hash: BlockHash) -> Vec<(NodeKey, u32)> {
        let mut v = Vec::new();
        for ((node, _, slot), chain) in &self.chains {
            for h in chain {
                if *h == hash {
                    v.push((*node, *slot));
                }
            }
        }
        v.sort_unstable();
        v
    }

    fn matches(&self, hashes: &[BlockHash]) -> Vec<Match> {
        let mut best: HashMap<NodeKey, (usize, u32)> = HashMap::new();
        for ((node, _, slot), chain) in &self.chains {
            let depth = chain.iter().zip(hashes).take_while(|(a, b)| a == b).count();
            if depth == 0 {
                continue;
            }
            let e = best.entry(*node).or_insert((depth, *slot));
            if depth > e.0 || (depth == e.0 && *slot < e.1) {
                *e = (depth, *slot);
            }
        }
        let mut v: Vec<Match> = best
            .into_iter()
            .map(|(node, (blocks, slot))| Match { node, slot, blocks })
            .collect();
        v.sort_unstable_by_key(|m| m.node);
        v
    }
}

#[test]
fn the_index_agrees_with_a_naive_model_on_random_event_sequences() {
    // Slots hold prefixes of a few documents, as real caches do: hash `i`
    // of document `d` always follows hash `i - 1` of the same document.
    const DOCS: u64 = 4;
    const DOC_BLOCKS: usize = 12;
    let doc = |d: u64| -> Vec<BlockHash> {
        let shared = d % 2; // documents 0 and 2, 1 and 3 share 3 blocks
        (0..DOC_BLOCKS as u64)
            .map(|i| {
                if i < 3 {
                    1000 * shared + i
                } else {
                    1000 * (d + 10) + i
                }
            })
            .collect()
    };
    for seed in 1..=40u64 {
        let mut rng = XorShift(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        let mut index = BlockIndex::new();
        let mut naive = Naive::default();
        // Which document each (node, slot) follows.
        let mut following: HashMap<(NodeKey, String, u32), u64> = HashMap::new();
        for step in 0..400 {
            let node = 1 + rng.below(4);
            let slot = rng.below(3) as u32;
            let model = if rng.below(8) == 0 { "other" } else { "m" };
            let key = (node, model.to_owned(), slot);
            let chain = naive.chains.get(&key).cloned().unwrap_or_default();
            let d = *following
                .entry(key.clone())
                .or_insert_with(|| rng.below(DOCS));
            let event = match rng.below(10) {
                0..=4 if chain.len() < DOC_BLOCKS => {
                    let n = 1 + rng.below((DOC_BLOCKS - chain.len()) as u64) as usize;
                    stored(slot, &doc(d)[chain.len()..chain.len() + n])
                }
                5..=6 if !chain.is_empty() => {
                    let n = 1 + rng.below(chain.len() as u64) as usize;
                    removed(slot, &chain[chain.len() - n..])
                }
                7 => removed(slot, &[rng.below(2000)]),
                8 => {
                    following.insert(key, rng.below(DOCS));
                    KvEvent::Cleared { slot }
                }
                _ if rng.below(20) == 0 => {
                    index.remove_node(node);
                    naive.chains.retain(|k, _| k.0 != node);
                    continue;
                }
                _ => continue,
            };
            let u = update(model, vec![event]);
            index.apply(node, &u);
            naive.apply(node, &u);
            assert_eq!(index.len(), naive.len(), "seed {seed} step {step}");
            for n in 1..=4 {
                let expect: usize = naive
                    .chains
                    .iter()
                    .filter(|(k, _)| k.0 == n)
                    .map(|(_, c)| c.len())
                    .sum();
                assert_eq!(index.node_blocks(n), expect, "seed {seed} step {step}");
            }
            for d in 0..DOCS {
                let hashes = doc(d);
                assert_eq!(
                    matches(&index, &hashes),
                    naive.matches(&hashes),
                    "seed {seed} step {step} doc {d}"
                );
                for &h in &hashes {
                    assert_eq!(
                        index.holders_of(h),
                        naive.holders_of(h),
                        "seed {seed} step {step}"
                    );
                }
            }
        }
    }
}
