//! Counting by policy and reason.

use super::*;

#[test]
fn decisions_are_counted_by_policy_and_reason() {
    let m = Metrics::default();
    m.record_route(RoutePolicy::LeastTtft, Reason::Warm, 64);
    m.record_route(RoutePolicy::LeastTtft, Reason::Warm, 32);
    m.record_route(RoutePolicy::RoundRobin, Reason::RoundRobin, 0);
    assert_eq!(m.decisions(RoutePolicy::LeastTtft, Reason::Warm), 2);
    assert_eq!(m.decisions(RoutePolicy::LeastTtft, Reason::Cold), 0);
    assert_eq!(m.decisions(RoutePolicy::RoundRobin, Reason::RoundRobin), 1);
    assert_eq!(m.predicted_cached_tokens(), 96);
}
