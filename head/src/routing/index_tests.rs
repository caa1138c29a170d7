//! The block index against hand-written event sequences and a naive model.

use super::index::MAX_SLOTS;
use super::{BlockIndex, Match};
use superfluid_proto::{BlockHash, KvEvent, KvUpdate};

pub(super) fn update(model: &str, events: Vec<KvEvent>) -> KvUpdate {
    KvUpdate {
        model: model.to_owned(),
        events,
    }
}

pub(super) fn stored(slot: u32, blocks: &[BlockHash]) -> KvEvent {
    KvEvent::Stored {
        slot,
        blocks: blocks.to_vec(),
    }
}

pub(super) fn removed(slot: u32, blocks: &[BlockHash]) -> KvEvent {
    KvEvent::Removed {
        slot,
        blocks: blocks.to_vec(),
    }
}

pub(super) fn matches(index: &BlockIndex, hashes: &[BlockHash]) -> Vec<Match> {
    let mut out = Vec::new();
    index.matches(hashes, &mut out);
    out.sort_unstable_by_key(|m| m.node);
    out
}

#[test]
fn stored_removed_and_cleared_are_replayed_exactly() {
    let mut index = BlockIndex::new();
    index.apply(
        1,
        &update("m", vec![stored(0, &[10, 11, 12]), stored(2, &[10, 11])]),
    );
    assert_eq!(index.len(), 5);
    assert_eq!(index.node_blocks(1), 5);
    assert_eq!(index.holders_of(10), vec![(1, 0), (1, 2)]);
    assert_eq!(
        matches(&index, &[10, 11, 12, 13]),
        vec![Match {
            node: 1,
            slot: 0,
            blocks: 3
        }]
    );

    index.apply(1, &update("m", vec![removed(0, &[12])]));
    assert_eq!(index.len(), 4);
    assert!(index.holders_of(12).is_empty());
    // Both slots now hold two blocks: the lowest slot wins.
    assert_eq!(
        matches(&index, &[10, 11, 12]),
        vec![Match {
            node: 1,
            slot: 0,
            blocks: 2
        }]
    );

    index.apply(1, &update("m", vec![KvEvent::Cleared { slot: 0 }]));
    assert_eq!(index.len(), 2);
    assert_eq!(index.holders_of(10), vec![(1, 2)]);
    assert_eq!(
        matches(&index, &[10, 11]),
        vec![Match {
            node: 1,
            slot: 2,
            blocks: 2
        }]
    );

    index.apply(
        1,
        &update("m", vec![stored(2, &[20]), removed(2, &[11, 20])]),
    );
    assert_eq!(index.len(), 1);
    assert_eq!(index.distinct_hashes(), 1);
    index.apply(1, &update("m", vec![removed(2, &[10])]));
    assert!(index.is_empty());
    assert_eq!(index.distinct_hashes(), 0);
    assert_eq!(index.node_blocks(1), 0);
}

#[test]
fn a_removal_that_does_not_match_the_tail_forgets_the_slot() {
    let mut index = BlockIndex::new();
    index.apply(
        3,
        &update("m", vec![stored(1, &[1, 2, 3]), stored(0, &[1])]),
    );
    index.apply(3, &update("m", vec![removed(1, &[2])]));
    assert_eq!(index.len(), 1, "slot 1 is forgotten, slot 0 kept");
    assert_eq!(index.holders_of(1), vec![(3, 0)]);
    assert!(index.holders_of(2).is_empty() && index.holders_of(3).is_empty());
    // Removing more than the chain holds also forgets it.
    index.apply(3, &update("m", vec![removed(0, &[0, 1])]));
    assert!(index.is_empty());
}

#[test]
fn nonsense_from_the_network_never_panics() {
    let mut index = BlockIndex::new();
    index.apply(
        9,
        &update(
            "m",
            vec![
                removed(5, &[1, 2]),
                KvEvent::Cleared { slot: u32::MAX },
                removed(u32::MAX, &[]),
                stored(u32::MAX, &[1]),
                stored(MAX_SLOTS, &[1]),
                stored(MAX_SLOTS - 1, &[1]),
                stored(0, &[]),
                removed(0, &[]),
                KvEvent::Cleared { slot: 7 },
            ],
        ),
    );
    assert_eq!(index.len(), 1, "only the slot below the cap is kept");
    assert_eq!(index.holders_of(1), vec![(9, MAX_SLOTS - 1)]);
    index.remove_node(12345);
    index.remove_node(9);
    index.remove_node(9);
    assert!(index.is_empty());
}

#[test]
fn models_keep_separate_chains_for_the_same_slot() {
    let mut index = BlockIndex::new();
    index.apply(1, &update("a", vec![stored(0, &[1, 2])]));
    index.apply(1, &update("b", vec![stored(0, &[7])]));
    index.apply(1, &update("b", vec![KvEvent::Cleared { slot: 0 }]));
    assert_eq!(index.len(), 2);
    assert_eq!(matches(&index, &[1, 2]).len(), 1);
}

#[test]
fn remove_node_drops_every_block_of_that_node_only() {
    let mut index = BlockIndex::new();
    for node in 1..=3u64 {
        index.apply(
            node,
            &update("m", vec![stored(0, &[1, 2, 3]), stored(1, &[1, 4])]),
        );
    }
    assert_eq!(index.len(), 15);
    index.remove_node(2);
    assert_eq!(index.len(), 10);
    assert_eq!(index.node_blocks(2), 0);
    assert_eq!(index.holders_of(1), vec![(1, 0), (1, 1), (3, 0), (3, 1)]);
    let found = matches(&index, &[1, 2, 3]);
    assert_eq!(found.iter().map(|m| m.node).collect::<Vec<_>>(), vec![1, 3]);
    // The freed number is reused without confusing the nodes.
    index.apply(4, &update("m", vec![stored(2, &[1, 2])]));
    let found = matches(&index, &[1, 2, 3]);
    assert_eq!(
        found,
        vec![
            Match {
                node: 1,
                slot: 0,
                blocks: 3
            },
            Match {
                node: 3,
                slot: 0,
                blocks: 3
            },
            Match {
                node: 4,
                slot: 2,
                blocks: 2
            },
        ]
    );
}

#[test]
fn matching_stops_at_the_first_block_nobody_holds() {
    let mut index = BlockIndex::new();
    index.apply(1, &update("m", vec![stored(0, &[1, 2, 3, 4])]));
    index.apply(2, &update("m", vec![stored(0, &[1])]));
    assert_eq!(
        matches(&index, &[1, 2, 3, 4, 5, 6]),
        vec![
            Match {
                node: 1,
                slot: 0,
                blocks: 4
            },
            Match {
                node: 2,
                slot: 0,
                blocks: 1
            }
        ]
    );
    assert!(matches(&index, &[9, 1, 2]).is_empty());
    assert!(matches(&index, &[]).is_empty());
}
