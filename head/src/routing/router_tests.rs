//! The router's bookkeeping of nodes, blocks and generations in flight.

use super::{Reason, RoutePolicy, Router};
use std::sync::OnceLock;
use std::time::{Duration, Instant};
use superfluid_proto::{block_hashes, model_seed, KvEvent, KvUpdate, LoadReport, BLOCK_TOKENS};

/// `ms` milliseconds after one fixed instant: the router's clock in these
/// tests.
fn at(ms: u64) -> Instant {
    static START: OnceLock<Instant> = OnceLock::new();
    *START.get_or_init(Instant::now) + Duration::from_millis(ms)
}

fn prompt(tokens: usize) -> Vec<u32> {
    (0..tokens as u32)
        .map(|i| i.wrapping_mul(2_654_435_761))
        .collect()
}

fn stored(model: &str, slot: u32, tokens: &[u32]) -> KvUpdate {
    KvUpdate {
        model: model.to_owned(),
        events: vec![KvEvent::Stored {
            slot,
            blocks: block_hashes(model_seed(model), tokens),
        }],
    }
}

fn report(prefill: f32, decode: f32) -> LoadReport {
    LoadReport {
        model: "m".to_owned(),
        running: 1,
        queued: 2,
        queued_prompt_tokens: 300,
        prefill_tokens_per_sec: prefill,
        decode_tokens_per_sec: decode,
    }
}

#[test]
fn routing_records_the_generation_until_it_finishes() {
    let mut router = Router::new(RoutePolicy::LeastTtft, 1);
    router.add_node(1, 2);
    let p = prompt(4 * BLOCK_TOKENS + 10);
    router.apply_kv(1, &stored("m", 1, &p[..2 * BLOCK_TOKENS]));

    let routed = router.route("m", &p, &[1], at(0)).unwrap();
    assert_eq!(
        (routed.node, routed.slot, routed.reason),
        (1, Some(1), Reason::Warm)
    );
    assert_eq!(routed.cached_tokens, 2 * BLOCK_TOKENS);
    let uncached = (p.len() - 2 * BLOCK_TOKENS) as u64;
    assert_eq!(routed.ticket.uncached_tokens(), uncached);
    let load = &router.nodes()[0];
    assert_eq!((load.in_flight, load.pending_prefill_tokens), (1, uncached));
    assert_eq!(load.indexed_blocks, 2);

    let second = router.route("m", &p, &[1], at(0)).unwrap();
    assert_eq!(router.nodes()[0].in_flight, 2);
    assert_eq!(router.nodes()[0].pending_prefill_tokens, 2 * uncached);

    router.first_token(&routed.ticket, at(0));
    router.first_token(&routed.ticket, at(0));
    assert_eq!(router.nodes()[0].pending_prefill_tokens, uncached);
    router.finished(routed.ticket.clone(), true, at(0));
    router.finished(routed.ticket.clone(), true, at(0));
    let load = &router.nodes()[0];
    assert_eq!((load.in_flight, load.pending_prefill_tokens), (1, uncached));
    assert!(load.mean_generation_secs.is_some());

    // Finished without a first token: its prompt leaves the queue too, and
    // a cancelled generation does not count towards the mean.
    let mean = router.nodes()[0].mean_generation_secs;
    router.finished(second.ticket, false, at(0));
    let load = &router.nodes()[0];
    assert_eq!((load.in_flight, load.pending_prefill_tokens), (0, 0));
    assert_eq!(load.mean_generation_secs, mean);

    let third = router.route("m", &p, &[1], at(0)).unwrap();
    assert_eq!(third.ticket.node(), 1);
    assert_eq!(router.nodes()[0].in_flight, 1);
}

#[test]
fn a_removed_node_is_forgotten_and_its_tickets_are_harmless() {
    let mut router = Router::new(RoutePolicy::LeastTtft, 1);
    router.add_node(7, 4);
    router.add_node(8, 4);
    let p = prompt(8 * BLOCK_TOKENS);
    router.apply_kv(7, &stored("m", 0, &p));
    assert_eq!(router.index().node_blocks(7), 8);

    // Node 7 holds the whole prompt but is not a candidate.
    for _ in 0..4 {
        let r = router.route("m", &p, &[8], at(0)).unwrap();
        assert_eq!((r.node, r.reason, r.cached_tokens), (8, Reason::Cold, 0));
        router.finished(r.ticket, true, at(0));
    }

    let ticket = router.route("m", &p, &[7, 8], at(0)).unwrap().ticket;
    assert_eq!(ticket.node(), 7);
    router.remove_node(7);
    assert_eq!(router.index().node_blocks(7), 0);
    assert!(router.index().is_empty());
    assert_eq!(router.nodes().len(), 1);

    // The same key back again: the old ticket does not touch its new load.
    router.add_node(7, 4);
    let fresh = router.route("m", &p, &[7], at(0)).unwrap();
    router.first_token(&ticket, at(0));
    router.finished(ticket, true, at(0));
    let load = router.nodes().into_iter().find(|l| l.key == 7).unwrap();
    assert_eq!(load.in_flight, 1);
    assert_eq!(load.pending_prefill_tokens, fresh.ticket.uncached_tokens());
    assert_eq!(load.mean_generation_secs, None);
}

#[test]
fn unknown_nodes_are_skipped_and_ignored() {
    let mut router = Router::new(RoutePolicy::RoundRobin, 1);
    let p = prompt(100);
    router.apply_kv(3, &stored("m", 0, &p));
    router.apply_load(3, &report(100.0, 10.0));
    assert!(router.index().is_empty());
    assert!(router.nodes().is_empty());
    assert!(router.route("m", &p, &[3], at(0)).is_none());
    router.add_node(4, 1);
    assert_eq!(router.route("m", &p, &[3, 4, 5], at(0)).unwrap().node, 4);
}

#[test]
fn load_reports_keep_measured_rates_only() {
    let mut router = Router::new(RoutePolicy::LeastTtft, 1);
    router.add_node(1, 2);
    router.apply_load(1, &report(0.0, f32::NAN));
    let load = &router.nodes()[0];
    assert_eq!(
        (load.prefill_tokens_per_sec, load.decode_tokens_per_sec),
        (None, None)
    );
    router.apply_load(1, &report(500.0, 50.0));
    router.apply_load(1, &report(0.0, -1.0));
    let load = &router.nodes()[0];
    assert_eq!(load.prefill_tokens_per_sec, Some(500.0));
    assert_eq!(load.decode_tokens_per_sec, Some(50.0));
    assert_eq!(
        (
            load.reported_running,
            load.reported_queued,
            load.reported_queued_prompt_tokens
        ),
        (1, 2, 300)
    );
}

#[test]
fn the_router_spreads_equal_nodes_and_prefers_the_fast_one() {
    let mut router = Router::new(RoutePolicy::LeastTtft, 1);
    for key in 1..=3 {
        router.add_node(key, 1);
    }
    let p = prompt(64);
    let mut nodes: Vec<u64> = (0..3)
        .map(|_| router.route("m", &p, &[1, 2, 3], at(0)).unwrap().node)
        .collect();
    nodes.sort_unstable();
    assert_eq!(nodes, [1, 2, 3]);

    let mut router = Router::new(RoutePolicy::LeastTtft, 1);
    router.add_node(1, 4);
    router.add_node(2, 4);
    router.apply_load(2, &report(3000.0, 100.0));
    router.apply_load(1, &report(300.0, 100.0));
    let r = router.route("m", &prompt(1000), &[1, 2], at(0)).unwrap();
    assert_eq!((r.node, r.reason), (2, Reason::Cold));
    router.set_policy(RoutePolicy::Random);
    assert_eq!(router.policy(), RoutePolicy::Random);
}

#[test]
fn the_mean_generation_time_leaves_out_time_spent_queued() {
    let mut router = Router::new(RoutePolicy::LeastTtft, 1);
    router.add_node(1, 1);
    // 1000 tokens/s: a 100-token prompt holds the slot 0.1 s for its prefill.
    router.apply_load(1, &report(1000.0, 100.0));
    let routed = router.route("m", &prompt(100), &[1], at(0)).unwrap();
    // Queued on the node for 0.3 s, then its first token, then done at once.
    router.first_token(&routed.ticket, at(300));
    router.finished(routed.ticket, true, at(300));
    let load = &router.nodes()[0];
    assert_eq!(load.mean_generation_secs, Some(0.1));
    assert_eq!(load.mean_decode_secs, Some(0.0));

    // A generation that ends without a first token (or is cancelled)
    // leaves the mean alone.
    let routed = router.route("m", &prompt(100), &[1], at(400)).unwrap();
    router.finished(routed.ticket, true, at(900));
    assert_eq!(router.nodes()[0].mean_generation_secs, Some(0.1));
    assert_eq!(router.nodes()[0].in_flight, 0);
}

#[test]
fn decoding_time_runs_from_the_first_token_to_the_end_on_the_callers_clock() {
    let mut router = Router::new(RoutePolicy::LeastTtft, 1);
    router.add_node(1, 1);
    router.apply_load(1, &report(1000.0, 100.0));
    let routed = router.route("m", &prompt(100), &[1], at(1000)).unwrap();
    assert_eq!(routed.ticket.elapsed(at(1250)), Duration::from_millis(250));
    assert_eq!(routed.ticket.elapsed(at(0)), Duration::ZERO);
    router.first_token(&routed.ticket, at(1200));
    // A second first token does not move the first one.
    router.first_token(&routed.ticket, at(1400));
    router.finished(routed.ticket, true, at(1700));
    // 0.5 s decoding and the prefill's 0.1 s; the 0.2 s queued is not counted.
    let first = 0.5 + 0.1;
    let load = &router.nodes()[0];
    assert_eq!(load.mean_decode_secs, Some(0.5));
    assert_eq!(load.mean_generation_secs, Some(first));

    // The next completed generation moves both means by a fifth of the way.
    let routed = router.route("m", &prompt(100), &[1], at(2000)).unwrap();
    router.first_token(&routed.ticket, at(2000));
    router.finished(routed.ticket, true, at(3000));
    let load = &router.nodes()[0];
    assert_eq!(load.mean_decode_secs, Some(0.5 + 0.2 * (1.0 - 0.5)));
    assert_eq!(
        load.mean_generation_secs,
        Some(first + 0.2 * ((1.0 + 0.1) - first))
    );
}
