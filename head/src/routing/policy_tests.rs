//! Routing decisions on hand-built snapshots.

use super::{route, BlockIndex, NodeKey, NodeView, Reason, RoutePolicy, RouteRequest, RouterState};
use superfluid_proto::{BlockHash, KvEvent, KvUpdate, BLOCK_TOKENS};

fn idle(key: NodeKey) -> NodeView {
    NodeView {
        key,
        slots: 4,
        in_flight: 0,
        pending_prefill_tokens: 0,
        prefill_tokens_per_sec: 0.0,
        decode_tokens_per_sec: 0.0,
        mean_decode_secs: 0.0,
        decoding_secs: Vec::new(),
    }
}

/// Records that `node` holds `blocks` in `slot`.
pub(super) fn hold(index: &mut BlockIndex, node: NodeKey, slot: u32, blocks: &[BlockHash]) {
    index.apply(
        node,
        &KvUpdate {
            model: "m".to_owned(),
            events: vec![KvEvent::Stored {
                slot,
                blocks: blocks.to_vec(),
            }],
        },
    );
}

fn prompt_blocks(n: usize) -> Vec<BlockHash> {
    (100..100 + n as u64).collect()
}

#[test]
fn policy_names_round_trip() {
    for p in RoutePolicy::ALL {
        assert_eq!(p.as_str().parse::<RoutePolicy>(), Ok(p));
        assert_eq!(p.to_string(), p.as_str());
    }
    let err = "fastest".parse::<RoutePolicy>().unwrap_err();
    for p in RoutePolicy::ALL {
        assert!(err.contains(p.as_str()), "{err}");
    }
    assert_eq!(RoutePolicy::default(), RoutePolicy::LeastTtft);
    let names: Vec<&str> = Reason::ALL.iter().map(Reason::as_str).collect();
    assert_eq!(
        names,
        [
            "warm",
            "cold",
            "load",
            "round_robin",
            "least_loaded",
            "random"
        ]
    );
}

#[test]
fn the_warm_node_wins_when_idle() {
    let blocks = prompt_blocks(4);
    let mut index = BlockIndex::new();
    hold(&mut index, 2, 3, &blocks[..3]);
    let nodes = [idle(1), idle(2)];
    let request = RouteRequest {
        blocks: &blocks,
        prompt_tokens: 4 * BLOCK_TOKENS,
    };
    let mut state = RouterState::new(1);
    for _ in 0..4 {
        let d = route(RoutePolicy::LeastTtft, &request, &nodes, &index, &mut state).unwrap();
        assert_eq!(d.index, 1);
        assert_eq!(d.reason, Reason::Warm);
        assert_eq!(d.slot, Some(3));
        assert_eq!(d.cached_tokens, 96);
        let expect = (4 * BLOCK_TOKENS - 96) as f64 / super::DEFAULT_PREFILL_TOKENS_PER_SEC;
        assert!((d.predicted_ttft_secs - expect).abs() < 1e-9);
    }
}

#[test]
fn a_saturated_warm_node_loses_to_an_idle_cold_one() {
    let blocks = prompt_blocks(4);
    let mut index = BlockIndex::new();
    hold(&mut index, 2, 0, &blocks[..3]);
    let mut warm = idle(2);
    warm.in_flight = 2 * warm.slots;
    let nodes = [idle(1), warm];
    let request = RouteRequest {
        blocks: &blocks,
        prompt_tokens: 4 * BLOCK_TOKENS,
    };
    let d = route(
        RoutePolicy::LeastTtft,
        &request,
        &nodes,
        &index,
        &mut RouterState::new(1),
    )
    .unwrap();
    assert_eq!(d.index, 0);
    assert_eq!(d.reason, Reason::Load);
    assert_eq!((d.slot, d.cached_tokens), (None, 0));
}

#[test]
fn a_fast_cold_node_beats_a_slow_warm_one_unless_the_shared_prefix_is_long() {
    let prompt_tokens = 2000;
    let blocks = prompt_blocks(prompt_tokens / BLOCK_TOKENS);
    let mut slow = idle(1);
    slow.prefill_tokens_per_sec = 100.0;
    let mut fast = idle(2);
    fast.prefill_tokens_per_sec = 400.0;
    let nodes = [slow, fast];
    let request = RouteRequest {
        blocks: &blocks,
        prompt_tokens,
    };

    let mut index = BlockIndex::new();
    hold(&mut index, 1, 0, &blocks[..1]);
    let d = route(
        RoutePolicy::LeastTtft,
        &request,
        &nodes,
        &index,
        &mut RouterState::new(1),
    )
    .unwrap();
    assert_eq!((d.index, d.reason), (1, Reason::Load));
    assert!((d.predicted_ttft_secs - 5.0).abs() < 1e-9);

    let mut index = BlockIndex::new();
    hold(&mut index, 1, 0, &blocks);
    let d = route(
        RoutePolicy::LeastTtft,
        &request,
        &nodes,
        &index,
        &mut RouterState::new(1),
    )
    .unwrap();
    assert_eq!((d.index, d.reason), (0, Reason::Warm));
    assert_eq!(d.cached_tokens, blocks.len() * BLOCK_TOKENS);
    assert!((d.predicted_ttft_secs - 0.16).abs() < 1e-9);
}

#[test]
fn queued_prefill_and_unknown_rates_count() {
    let blocks = prompt_blocks(2);
    let index = BlockIndex::new();
    let mut busy = idle(1);
    busy.pending_prefill_tokens = 1000;
    busy.prefill_tokens_per_sec = 1000.0;
    // Unknown rate: the median of the known ones (1000), so only the queue differs.
    let nodes = [busy, idle(2)];
    let request = RouteRequest {
        blocks: &blocks,
        prompt_tokens: 100,
    };
    let d = route(
        RoutePolicy::LeastTtft,
        &request,
        &nodes,
        &index,
        &mut RouterState::new(1),
    )
    .unwrap();
    assert_eq!((d.index, d.reason), (1, Reason::Cold));
    assert!((d.predicted_ttft_secs - 0.1).abs() < 1e-9);
}

#[test]
fn a_node_outside_the_candidates_is_never_chosen() {
    let blocks = prompt_blocks(4);
    let mut index = BlockIndex::new();
    hold(&mut index, 7, 0, &blocks);
    let nodes = [idle(1), idle(2)];
    let request = RouteRequest {
        blocks: &blocks,
        prompt_tokens: 4 * BLOCK_TOKENS,
    };
    let mut state = RouterState::new(3);
    for policy in RoutePolicy::ALL {
        for _ in 0..8 {
            let d = route(policy, &request, &nodes, &index, &mut state).unwrap();
            assert!(d.index < 2);
            assert_eq!((d.slot, d.cached_tokens), (None, 0));
            assert_ne!(d.reason, Reason::Warm);
        }
    }
}

#[test]
fn every_policy_reports_the_chosen_nodes_cache() {
    let blocks = prompt_blocks(2);
    let mut index = BlockIndex::new();
    hold(&mut index, 1, 5, &blocks);
    let nodes = [idle(1)];
    // The whole prompt is cached: all but its last token count.
    let request = RouteRequest {
        blocks: &blocks,
        prompt_tokens: 2 * BLOCK_TOKENS,
    };
    let mut state = RouterState::new(3);
    for policy in RoutePolicy::ALL {
        let d = route(policy, &request, &nodes, &index, &mut state).unwrap();
        assert_eq!(
            (d.index, d.slot, d.cached_tokens),
            (0, Some(5), 2 * BLOCK_TOKENS - 1)
        );
    }
}

#[test]
fn round_robin_cycles() {
    let nodes: Vec<NodeView> = (1..=3).map(idle).collect();
    let request = RouteRequest {
        blocks: &[],
        prompt_tokens: 10,
    };
    let mut state = RouterState::new(0);
    let index = BlockIndex::new();
    let picks: Vec<usize> = (0..6)
        .map(|_| {
            route(
                RoutePolicy::RoundRobin,
                &request,
                &nodes,
                &index,
                &mut state,
            )
            .unwrap()
        })
        .inspect(|d| assert_eq!(d.reason, Reason::RoundRobin))
        .map(|d| d.index)
        .collect();
    assert_eq!(picks, [0, 1, 2, 0, 1, 2]);
}

#[test]
fn least_loaded_picks_the_emptiest() {
    let mut a = idle(1);
    a.in_flight = 2; // 2 of 4
    let mut b = idle(2);
    b.slots = 8;
    b.in_flight = 3; // 3 of 8
    let mut c = idle(3);
    c.slots = 1;
    c.in_flight = 1;
    let nodes = [a, b, c];
    let request = RouteRequest {
        blocks: &[],
        prompt_tokens: 10,
    };
    let mut state = RouterState::new(0);
    for _ in 0..4 {
        let d = route(
            RoutePolicy::LeastLoaded,
            &request,
            &nodes,
            &BlockIndex::new(),
            &mut state,
        )
        .unwrap();
        assert_eq!((d.index, d.reason), (1, Reason::LeastLoaded));
    }
}

#[test]
fn random_stays_in_range_and_visits_every_node() {
    let nodes: Vec<NodeView> = (1..=5).map(idle).collect();
    let request = RouteRequest {
        blocks: &[],
        prompt_tokens: 10,
    };
    let mut state = RouterState::new(42);
    let mut seen = [0usize; 5];
    for _ in 0..500 {
        let d = route(
            RoutePolicy::Random,
            &request,
            &nodes,
            &BlockIndex::new(),
            &mut state,
        )
        .unwrap();
        assert_eq!(d.reason, Reason::Random);
        seen[d.index] += 1;
    }
    assert!(seen.iter().all(|&n| n > 50), "{seen:?}");
}

#[test]
fn no_candidates_no_decision() {
    let request = RouteRequest {
        blocks: &[],
        prompt_tokens: 10,
    };
    for policy in RoutePolicy::ALL {
        assert!(route(
            policy,
            &request,
            &[],
            &BlockIndex::new(),
            &mut RouterState::new(0)
        )
        .is_none());
    }
}

#[test]
fn equal_idle_nodes_share_the_work_under_least_ttft() {
    let nodes: Vec<NodeView> = (1..=4).map(idle).collect();
    let blocks = prompt_blocks(3);
    let request = RouteRequest {
        blocks: &blocks,
        prompt_tokens: 100,
    };
    let mut state = RouterState::new(0);
    let mut seen = [0usize; 4];
    for _ in 0..8 {
        let d = route(
            RoutePolicy::LeastTtft,
            &request,
            &nodes,
            &BlockIndex::new(),
            &mut state,
        )
        .unwrap();
        assert_eq!(d.reason, Reason::Cold);
        seen[d.index] += 1;
    }
    assert_eq!(seen, [2, 2, 2, 2]);
}

#[test]
fn near_ties_go_to_the_node_with_fewer_generations_per_slot() {
    let mut a = idle(1);
    a.in_flight = 2;
    let b = idle(2);
    let mut index = BlockIndex::new();
    let blocks = prompt_blocks(3);
    // Node 1 is a hair faster: well within the 1% tie margin.
    a.prefill_tokens_per_sec = 1000.0;
    let mut b = b;
    b.prefill_tokens_per_sec = 995.0;
    hold(&mut index, 2, 0, &blocks[..1]);
    hold(&mut index, 1, 0, &blocks[..1]);
    let request = RouteRequest {
        blocks: &blocks,
        prompt_tokens: 3 * BLOCK_TOKENS,
    };
    let d = route(
        RoutePolicy::LeastTtft,
        &request,
        &[a, b],
        &index,
        &mut RouterState::new(0),
    )
    .unwrap();
    assert_eq!((d.index, d.reason, d.slot), (1, Reason::Warm, Some(0)));
}

#[test]
fn with_nothing_cached_a_cost_within_twice_the_best_is_a_tie_and_the_less_loaded_node_wins() {
    let mut fast = idle(1);
    fast.prefill_tokens_per_sec = 1800.0;
    fast.in_flight = 1;
    let mut slow = idle(2);
    slow.prefill_tokens_per_sec = 1000.0;
    let blocks = prompt_blocks(3);
    let request = RouteRequest {
        blocks: &blocks,
        prompt_tokens: 3 * BLOCK_TOKENS,
    };
    let decide = |fast: &NodeView, index: &BlockIndex| {
        route(
            RoutePolicy::LeastTtft,
            &request,
            &[fast.clone(), slow.clone()],
            index,
            &mut RouterState::new(0),
        )
        .unwrap()
    };
    // Cold everywhere: 1.8x apart is a tie, won by the idle node.
    let d = decide(&fast, &BlockIndex::new());
    assert_eq!((d.index, d.reason), (1, Reason::Cold), "{d:?}");
    // More than twice apart is no tie: the fast node wins though busier.
    let mut faster = fast.clone();
    faster.prefill_tokens_per_sec = 2500.0;
    let d = decide(&faster, &BlockIndex::new());
    assert_eq!((d.index, d.reason), (0, Reason::Cold), "{d:?}");
    // The same prefix held on both: 1.8x apart is no tie, the faster wins.
    let mut index = BlockIndex::new();
    hold(&mut index, 1, 0, &blocks[..1]);
    hold(&mut index, 2, 0, &blocks[..1]);
    let d = decide(&fast, &index);
    assert_eq!((d.index, d.reason), (0, Reason::Warm), "{d:?}");
}
