use super::{report::SimReport, run_simulated};
use crate::RoutingArgs;

/// A short simulated run near saturation, where nodes fill and ties are
/// many: both workloads, two no-reuse pairs.
fn short(seed: u64) -> RoutingArgs {
    RoutingArgs {
        model: None,
        seed,
        sim_seconds: 0.5,
        real_conversations: 0,
        loads: vec!["near-saturation".into()],
        no_reuse_pairs: 2,
        workload: None,
        skip_sim: false,
        skip_real: true,
        json: true,
    }
}

fn json(report: &SimReport) -> String {
    serde_json::to_string(report).expect("a report serialises")
}

#[test]
fn a_seed_gives_the_same_simulated_figures_on_every_run() {
    let first = run_simulated(&short(7)).expect("first run");
    let again = run_simulated(&short(7)).expect("second run");
    assert_eq!(json(&first), json(&again));
    // Real work was measured, not two empty reports.
    let measured: usize = first
        .chat
        .iter()
        .chain(&first.no_reuse)
        .flat_map(|rate| &rate.policies)
        .map(|p| p.requests)
        .sum();
    assert!(measured > 0, "{}", json(&first));
    assert!(first
        .chat
        .iter()
        .chain(&first.no_reuse)
        .flat_map(|rate| &rate.policies)
        .all(|p| p.failed == 0));
}

#[test]
fn another_seed_gives_other_figures() {
    let one = run_simulated(&short(7)).expect("seed 7");
    let other = run_simulated(&short(8)).expect("seed 8");
    assert_ne!(json(&one), json(&other));
}
