//! Counting by policy and reason, tokens by source, reconnects.

use super::*;

fn sample(m: &Metrics, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let family = m.families().into_iter().find(|f| f.name() == name)?;
    family
        .get_metric()
        .iter()
        .find(|metric| {
            labels.iter().all(|(k, v)| {
                metric
                    .get_label()
                    .iter()
                    .any(|l| l.name() == *k && l.value() == *v)
            })
        })
        .map(|metric| metric.get_counter().get_value())
}

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

#[test]
fn every_policy_and_reason_is_listed_before_any_decision() {
    let m = Metrics::default();
    let decisions = m
        .families()
        .into_iter()
        .find(|f| f.name() == "superfluid_route_decisions_total")
        .map(|f| f.get_metric().len());
    assert_eq!(decisions, Some(RoutePolicy::ALL.len() * Reason::ALL.len()));
}

#[test]
fn prompt_tokens_split_into_cached_and_computed() {
    let m = Metrics::default();
    m.record_finished("smol", 100, 64);
    m.record_finished("smol", 10, 0);
    let name = "superfluid_prompt_tokens_total";
    let cached = sample(&m, name, &[("model", "smol"), ("source", "cached")]);
    let computed = sample(&m, name, &[("model", "smol"), ("source", "computed")]);
    assert_eq!((cached, computed), (Some(64.0), Some(46.0)));
}

#[test]
fn a_node_report_of_more_cached_than_prompt_tokens_counts_no_negative_compute() {
    let m = Metrics::default();
    m.record_finished("smol", 10, 20);
    let name = "superfluid_prompt_tokens_total";
    let cached = sample(&m, name, &[("source", "cached")]);
    let computed = sample(&m, name, &[("source", "computed")]);
    assert_eq!((cached, computed), (Some(10.0), Some(0.0)));
}

#[test]
fn only_a_second_join_under_a_name_is_a_reconnect() {
    let m = Metrics::default();
    m.record_join("gpu-1");
    m.record_join("gpu-2");
    m.record_join("gpu-1");
    let name = "superfluid_node_reconnects_total";
    assert_eq!(sample(&m, name, &[("node", "gpu-1")]), Some(1.0));
    assert_eq!(sample(&m, name, &[("node", "gpu-2")]), Some(0.0));
}

#[test]
fn requests_are_counted_by_endpoint_model_and_status_code() {
    let m = Metrics::default();
    m.record_request("/v1/chat/completions", "smol", 200);
    m.record_request("/v1/chat/completions", "smol", 400);
    m.record_request("/v1/chat/completions", "smol", 400);
    let name = "superfluid_http_requests_total";
    let bad = [("model", "smol"), ("code", "400")];
    assert_eq!(sample(&m, name, &bad), Some(2.0));
    assert_eq!(sample(&m, name, &[("code", "200")]), Some(1.0));
}

#[test]
fn every_family_is_named_with_the_prefix_whether_or_not_it_has_series() {
    let m = Metrics::default();
    let names = m.names();
    assert!(names.contains(&"superfluid_time_to_first_token_seconds".to_owned()));
    assert!(names.contains(&"superfluid_http_requests_total".to_owned()));
    assert!(
        names.iter().all(|n| n.starts_with("superfluid_")),
        "{names:?}"
    );
}
