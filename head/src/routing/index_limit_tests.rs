//! The index keeps no more for a node than its described models can hold.

use super::index::{MAX_CHAIN_BLOCKS, MAX_SLOTS};
use super::index_tests::{matches, stored, update};
use super::{BlockIndex, Reason, RoutePolicy, Router};
use superfluid_proto::{
    block_hashes, model_seed, BlockHash, KvEvent, KvUpdate, ModelDescription, BLOCK_TOKENS,
};

fn model(id: &str, ctx: u32, slots: u32) -> ModelDescription {
    ModelDescription {
        id: id.into(),
        ctx,
        slots,
        sha256: String::new(),
        ..Default::default()
    }
}

/// The most blocks a slot of a model with `ctx` tokens keeps.
fn chain_cap(ctx: u32) -> usize {
    ctx as usize / BLOCK_TOKENS + 1
}

#[test]
fn a_node_storing_without_end_keeps_its_first_blocks_up_to_its_context() {
    let mut index = BlockIndex::new();
    index.describe_node(1, &[model("m", 256, 2)]);
    let mut next: BlockHash = 0;
    for _ in 0..1000 {
        let blocks: Vec<BlockHash> = (next..next + 50).collect();
        next += 50;
        index.apply(
            1,
            &update("m", vec![stored(0, &blocks), stored(1, &blocks)]),
        );
    }
    assert_eq!(index.len(), 2 * chain_cap(256));
    assert_eq!(index.node_blocks(1), 2 * chain_cap(256));
    let first: Vec<BlockHash> = (0..20).collect();
    let found = matches(&index, &first);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!((found[0].node, found[0].blocks), (1, chain_cap(256)));
}

#[test]
fn slots_and_models_a_node_did_not_describe_are_left_out() {
    let mut index = BlockIndex::new();
    index.describe_node(1, &[model("m", 4096, 2)]);
    index.apply(1, &update("m", vec![stored(2, &[1]), stored(1, &[2])]));
    index.apply(1, &update("other", vec![stored(0, &[3])]));
    assert_eq!(index.len(), 1);
    assert_eq!(index.holders_of(2), vec![(1, 1)]);
    assert!(index.holders_of(1).is_empty() && index.holders_of(3).is_empty());
}

#[test]
fn a_described_context_or_slot_count_past_the_absolute_limits_is_held_to_them() {
    let mut index = BlockIndex::new();
    index.describe_node(1, &[model("m", u32::MAX, u32::MAX)]);
    let long: Vec<BlockHash> = (0..MAX_CHAIN_BLOCKS as u64 + 10).collect();
    index.apply(
        1,
        &update("m", vec![stored(0, &long), stored(MAX_SLOTS, &[1])]),
    );
    assert_eq!(index.len(), MAX_CHAIN_BLOCKS);
}

#[test]
fn forgetting_a_node_forgets_its_limits() {
    let mut index = BlockIndex::new();
    index.describe_node(1, &[model("m", 64, 1)]);
    index.remove_node(1);
    index.apply(1, &update("other", vec![stored(3, &[1, 2, 3, 4])]));
    assert_eq!(index.len(), 4, "held to the absolute limits only");
}

#[test]
fn the_router_routes_to_a_flooding_node_by_the_blocks_it_kept() {
    let mut router = Router::new(RoutePolicy::LeastTtft, 1);
    router.add_node(1, 1);
    router.describe_node(1, &[model("m", 4 * BLOCK_TOKENS as u32, 1)]);
    let tokens: Vec<u32> = (0..64 * BLOCK_TOKENS as u32).collect();
    let hashes = block_hashes(model_seed("m"), &tokens);
    for chunk in hashes.chunks(3) {
        let update = KvUpdate {
            model: "m".into(),
            events: vec![KvEvent::Stored {
                slot: 0,
                blocks: chunk.to_vec(),
            }],
        };
        router.apply_kv(1, &update);
    }
    assert_eq!(router.index().len(), chain_cap(4 * BLOCK_TOKENS as u32));
    let routed = router.route(
        "m",
        &tokens[..3 * BLOCK_TOKENS + 5],
        &[1],
        std::time::Instant::now(),
    );
    let routed = routed.unwrap();
    assert_eq!(
        (routed.node, routed.slot, routed.reason),
        (1, Some(0), Reason::Warm)
    );
    assert_eq!(routed.cached_tokens, 3 * BLOCK_TOKENS);
}
