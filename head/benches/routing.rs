//! One least-ttft routing decision over a large fleet: 256 nodes of 8 slots,
//! about a million cached blocks, a 4096-token prompt that several nodes
//! hold at various depths.

use criterion::{criterion_group, criterion_main, Criterion};
use std::hint::black_box;
use superfluid_head::routing::{
    policy, BlockIndex, NodeView, RoutePolicy, RouteRequest, RouterState,
};
use superfluid_proto::{BlockHash, KvEvent, KvUpdate, BLOCK_TOKENS};

const NODES: u64 = 256;
const SLOTS: u32 = 8;
const CHAIN_BLOCKS: usize = 488;
const PROMPT_BLOCKS: usize = 128;

/// A well-spread hash for block `i` of a chain named `name`.
fn hash(name: u64, i: u64) -> BlockHash {
    let mut h = name.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ i.wrapping_mul(0xc2b2_ae3d_27d4_eb4f);
    h ^= h >> 31;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^ (h >> 29)
}

/// How many leading blocks of the prompt a slot holds: every node's slot 0
/// holds a shared 16-block system prompt, slot 1 a conversation of varying
/// depth, and one node in 32 the whole prompt in slot 2.
fn depth(node: u64, slot: u32) -> usize {
    match slot {
        0 => 16,
        1 => 16 + (node % 16) as usize * 7,
        2 if node % 32 == 0 => PROMPT_BLOCKS,
        _ => 0,
    }
}

fn build_index(prompt: &[BlockHash]) -> BlockIndex {
    let mut index = BlockIndex::new();
    for node in 0..NODES {
        for slot in 0..SLOTS {
            let d = depth(node, slot);
            let name = (node << 8) | u64::from(slot) | 1 << 40;
            let chain: Vec<BlockHash> = prompt[..d]
                .iter()
                .copied()
                .chain((d..CHAIN_BLOCKS).map(|i| hash(name, i as u64)))
                .collect();
            let events = chain
                .chunks(61)
                .map(|blocks| KvEvent::Stored {
                    slot,
                    blocks: blocks.to_vec(),
                })
                .collect();
            index.apply(
                node,
                &KvUpdate {
                    model: "m".to_owned(),
                    events,
                },
            );
        }
    }
    index
}

fn views() -> Vec<NodeView> {
    (0..NODES)
        .map(|key| NodeView {
            key,
            slots: SLOTS,
            in_flight: (key % 11) as u32,
            pending_prefill_tokens: (key % 5) * 700,
            prefill_tokens_per_sec: if key % 7 == 0 {
                0.0
            } else {
                200.0 + (key % 9) as f64 * 150.0
            },
            decode_tokens_per_sec: if key % 7 == 0 {
                0.0
            } else {
                60.0 + (key % 4) as f64 * 30.0
            },
            mean_decode_secs: if key % 3 == 0 {
                0.0
            } else {
                1.0 + (key % 6) as f64
            },
            decoding_secs: (0..(key % 11).min(SLOTS as u64))
                .map(|i| 0.1 * i as f64)
                .collect(),
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let prompt: Vec<BlockHash> = (0..PROMPT_BLOCKS as u64).map(|i| hash(1, i)).collect();
    let index = build_index(&prompt);
    assert!(index.len() > 990_000, "{} blocks", index.len());
    let mut found = Vec::new();
    index.matches(&prompt, &mut found);
    assert_eq!(
        found.len(),
        NODES as usize,
        "every node holds the system prompt"
    );
    assert_eq!(found.iter().map(|m| m.blocks).max(), Some(PROMPT_BLOCKS));
    let nodes = views();
    let request = RouteRequest {
        blocks: &prompt,
        prompt_tokens: PROMPT_BLOCKS * BLOCK_TOKENS,
    };
    let mut state = RouterState::new(1);
    c.bench_function("route least-ttft 256 nodes 1M blocks", |b| {
        b.iter(|| {
            policy::route(
                RoutePolicy::LeastTtft,
                black_box(&request),
                black_box(&nodes),
                black_box(&index),
                &mut state,
            )
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
