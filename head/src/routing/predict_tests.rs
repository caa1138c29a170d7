//! The time-to-first-token model on hand-built nodes.

use super::policy_tests::hold;
use super::predict::Rates;
use super::{route, BlockIndex, Decision, NodeView, RoutePolicy, RouteRequest, RouterState};
use superfluid_proto::BLOCK_TOKENS;

/// A node of 2 slots computing 1000 prompt tokens/s whose generations
/// decode for 1 s on average.
fn node(in_flight: u32, pending_prefill_tokens: u64, decoding_secs: &[f64]) -> NodeView {
    NodeView {
        key: 1,
        slots: 2,
        in_flight,
        pending_prefill_tokens,
        prefill_tokens_per_sec: 1000.0,
        decode_tokens_per_sec: 100.0,
        mean_decode_secs: 1.0,
        decoding_secs: decoding_secs.to_vec(),
    }
}

fn ttft(view: &NodeView, prompt: usize) -> f64 {
    Rates::of(std::slice::from_ref(view)).ttft(view, prompt, 0)
}

fn close(actual: f64, expected: f64) {
    assert!((actual - expected).abs() < 1e-9, "{actual} != {expected}");
}

#[test]
fn a_free_slot_waits_only_for_the_prompts_ahead() {
    close(ttft(&node(0, 0, &[]), 500), 0.5);
    // One generation still prefilling 300 tokens: they go first.
    close(ttft(&node(1, 300, &[]), 500), 0.8);
}

#[test]
fn a_full_node_waits_for_the_generation_nearest_its_end() {
    // Both slots decoding, for 0.25 s and 0.75 s: the second ends in 0.25 s.
    close(ttft(&node(2, 0, &[0.25, 0.75]), 500), 0.25 + 0.5);
    // A generation decoding longer than the mean is taken to end now.
    close(ttft(&node(2, 0, &[1.5, 0.1]), 500), 0.5);
}

#[test]
fn queued_generations_each_hold_a_slot_for_their_prompt_and_decoding() {
    // Two decoding (ending in 0.5 s and 0.9 s) and one queued with 200
    // prompt tokens: it takes the slot freed at 0.5 s and holds it for
    // 0.2 s + 1 s, so the new generation gets the slot freed at 0.9 s.
    close(ttft(&node(3, 200, &[0.5, 0.1]), 500), 0.9 + 0.5);
    // Three queued with 400 prompt tokens between them, each holding a
    // slot for 0.4 / 3 s + 1 s: they take the slots freed at 0.5 s, 0.9 s
    // and 0.5 s + hold, so the new one gets the slot freed at 0.9 s + hold.
    let hold = 0.4 / 3.0 + 1.0;
    close(ttft(&node(5, 400, &[0.5, 0.1]), 500), 0.9 + hold + 0.5);
}

#[test]
fn prompts_still_to_compute_outlast_a_short_slot_wait() {
    // Both slots prefilling 3000 tokens between them: each frees its slot
    // after its share (1.5 s) and 1 s of decoding, but the prompt ahead,
    // 3 s of it, is the longer wait.
    close(ttft(&node(2, 3000, &[]), 500), 3.0 + 0.5);
}

/// Least-ttft's choice among `nodes` for a prompt of `prompt_tokens` whose
/// first block every node holds, so that costs are compared closely (as
/// they are whenever some node holds part of a prompt).
fn least_ttft_warm(nodes: &[NodeView], prompt_tokens: usize) -> Decision {
    let blocks = [100];
    let mut index = BlockIndex::new();
    for node in nodes {
        hold(&mut index, node.key, 0, &blocks);
    }
    let request = RouteRequest {
        blocks: &blocks,
        prompt_tokens,
    };
    route(
        RoutePolicy::LeastTtft,
        &request,
        nodes,
        &index,
        &mut RouterState::new(0),
    )
    .unwrap()
}

#[test]
fn least_ttft_weighs_a_queue_more_than_its_own_prompt() {
    // A node 4x faster whose queue would make it the quickest to answer
    // still loses to an idle node: the queue delays every generation sent
    // after this one as well.
    let mut fast = node(2, 0, &[0.6, 0.6]);
    fast.prefill_tokens_per_sec = 4000.0;
    let mut slow = node(0, 0, &[]);
    slow.key = 2;
    let nodes = [fast, slow];
    let uncached = (1000 - BLOCK_TOKENS) as f64;
    let d = least_ttft_warm(&nodes, 1000);
    // Fast: 0.4 s queued + 0.242 s; slow: 0.968 s. Counting the queue
    // twice, 1.042 s against 0.968 s.
    close(
        Rates::of(&nodes).ttft(&nodes[0], 1000, BLOCK_TOKENS),
        0.4 + uncached / 4000.0,
    );
    assert_eq!(d.index, 1);
    close(d.predicted_ttft_secs, uncached / 1000.0);
    // With a shorter queue the fast node wins.
    let mut nodes = nodes;
    nodes[0].decoding_secs = vec![0.8, 0.8];
    let d = least_ttft_warm(&nodes, 1000);
    assert_eq!(d.index, 0);
    close(d.predicted_ttft_secs, 0.2 + uncached / 4000.0);
}
