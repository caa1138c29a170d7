//! The head's counters: routing decisions, prompt tokens served from cache,
//! generations finished, failed and retried.
//!
//! Counters are plain atomics the fleet updates on the request path; they
//! know nothing of the fleet. The page `GET /metrics` serves, with each
//! connected node's gauges, is written above the fleet, in
//! [`crate::api::metrics_page`].

use std::sync::atomic::{AtomicU64, Ordering};

use crate::routing::{Reason, RoutePolicy};

/// The head's counters. One per fleet; cheap to update from any thread.
#[derive(Debug, Default)]
pub struct Metrics {
    /// Decisions by policy (index into [`RoutePolicy::ALL`]) and reason
    /// (index into [`Reason::ALL`]).
    decisions: [[AtomicU64; Reason::ALL.len()]; RoutePolicy::ALL.len()],
    predicted_cached_tokens: AtomicU64,
    prompt_tokens: AtomicU64,
    cached_tokens: AtomicU64,
    generations: AtomicU64,
    failed_generations: AtomicU64,
    retried_generations: AtomicU64,
}

fn position<T: PartialEq>(all: &[T], item: &T) -> usize {
    all.iter().position(|x| x == item).unwrap_or(0)
}

impl Metrics {
    /// Counts one routing decision and the prompt tokens it expected cached.
    pub fn record_route(&self, policy: RoutePolicy, reason: Reason, predicted_cached: usize) {
        let p = position(&RoutePolicy::ALL, &policy);
        let r = position(&Reason::ALL, &reason);
        self.decisions[p][r].fetch_add(1, Ordering::Relaxed);
        self.predicted_cached_tokens
            .fetch_add(predicted_cached as u64, Ordering::Relaxed);
    }

    /// Counts a generation that finished on a node, with its prompt's size
    /// and how much of it was already in the node's cache.
    pub fn record_finished(&self, prompt_tokens: u32, cached_tokens: u32) {
        self.generations.fetch_add(1, Ordering::Relaxed);
        self.prompt_tokens
            .fetch_add(u64::from(prompt_tokens), Ordering::Relaxed);
        self.cached_tokens
            .fetch_add(u64::from(cached_tokens), Ordering::Relaxed);
    }

    /// Counts a generation that failed on a node or lost its node.
    pub fn record_failed(&self) {
        self.failed_generations.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a generation sent to another node because its node was lost
    /// before the first token.
    pub fn record_retried(&self) {
        self.retried_generations.fetch_add(1, Ordering::Relaxed);
    }

    /// Generations sent to another node so far.
    pub fn retried(&self) -> u64 {
        self.retried_generations.load(Ordering::Relaxed)
    }

    /// Prompt tokens the router expected the chosen nodes to hold cached.
    pub fn predicted_cached_tokens(&self) -> u64 {
        self.predicted_cached_tokens.load(Ordering::Relaxed)
    }

    /// Prompt tokens of generations that finished.
    pub fn prompt_tokens(&self) -> u64 {
        self.prompt_tokens.load(Ordering::Relaxed)
    }

    /// Prompt tokens nodes found in their cache, of generations that finished.
    pub fn cached_tokens(&self) -> u64 {
        self.cached_tokens.load(Ordering::Relaxed)
    }

    /// Generations that finished on a node.
    pub fn generations(&self) -> u64 {
        self.generations.load(Ordering::Relaxed)
    }

    /// Generations that failed on a node or lost their node.
    pub fn failed(&self) -> u64 {
        self.failed_generations.load(Ordering::Relaxed)
    }

    /// Decisions so far with this policy and reason.
    pub fn decisions(&self, policy: RoutePolicy, reason: Reason) -> u64 {
        let p = position(&RoutePolicy::ALL, &policy);
        let r = position(&Reason::ALL, &reason);
        self.decisions[p][r].load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests;
