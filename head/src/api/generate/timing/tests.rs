//! How many observations each histogram gets from one generation.

use super::*;
use crate::metrics::Metrics;

fn counts(latency: &Latency) -> [u64; 4] {
    [
        latency.queue.get_sample_count(),
        latency.ttft.get_sample_count(),
        latency.inter_token.get_sample_count(),
        latency.duration.get_sample_count(),
    ]
}

#[test]
fn a_generation_of_n_tokens_observes_one_first_token_and_n_minus_one_gaps() {
    let metrics = Metrics::default();
    let mut timing = Timing::new(Some(metrics.latency("smol")), Instant::now());
    timing.dispatched();
    timing.tokens(1);
    timing.tokens(1);
    timing.tokens(2);
    timing.end();
    assert_eq!(counts(&metrics.latency("smol")), [1, 1, 3, 1]);
}

#[test]
fn tokens_arriving_with_the_first_count_as_gaps_of_zero() {
    let metrics = Metrics::default();
    let mut timing = Timing::new(Some(metrics.latency("smol")), Instant::now());
    timing.tokens(3);
    let latency = metrics.latency("smol");
    assert_eq!(latency.inter_token.get_sample_count(), 2);
    assert_eq!(latency.inter_token.get_sample_sum(), 0.0);
}

#[test]
fn a_generation_ended_twice_is_observed_once() {
    let metrics = Metrics::default();
    let mut timing = Timing::new(Some(metrics.latency("smol")), Instant::now());
    timing.end();
    timing.end();
    assert_eq!(metrics.latency("smol").duration.get_sample_count(), 1);
}

#[test]
fn models_are_observed_apart() {
    let metrics = Metrics::default();
    let mut timing = Timing::new(Some(metrics.latency("a")), Instant::now());
    timing.tokens(1);
    assert_eq!(metrics.latency("a").ttft.get_sample_count(), 1);
    assert_eq!(metrics.latency("b").ttft.get_sample_count(), 0);
}

#[test]
fn an_empty_batch_of_tokens_is_not_a_first_token() {
    let metrics = Metrics::default();
    let mut timing = Timing::new(Some(metrics.latency("smol")), Instant::now());
    timing.tokens(0);
    assert_eq!(metrics.latency("smol").ttft.get_sample_count(), 0);
    timing.tokens(1);
    assert_eq!(metrics.latency("smol").ttft.get_sample_count(), 1);
}
