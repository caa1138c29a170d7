//! Usage by API key, read from the keys at scrape time: the same counts
//! `superfluid keys list` shows, by key name. Only named keys (made with
//! `superfluid keys`) are listed; static `--api-key` keys have no name.

use prometheus::proto::{MetricFamily, MetricType};

use super::nodes::{counter_sample, family};
use crate::keys::{KeyRecord, UsageSnapshot};

type Figure = (&'static str, &'static str, fn(&UsageSnapshot) -> u64);

const FIGURES: [Figure; 4] = [
    (
        "superfluid_api_key_requests_total",
        "Requests that presented the API key, by key name.",
        |u| u.requests,
    ),
    (
        "superfluid_api_key_prompt_tokens_total",
        "Prompt tokens of the key's generations, by key name.",
        |u| u.prompt_tokens,
    ),
    (
        "superfluid_api_key_cached_prompt_tokens_total",
        "Of the key's prompt tokens, those a node found in its KV cache, by key name.",
        |u| u.cached_tokens,
    ),
    (
        "superfluid_api_key_completion_tokens_total",
        "Tokens generated for the key, by key name.",
        |u| u.completion_tokens,
    ),
];

/// The names of the key families.
pub fn names() -> impl Iterator<Item = &'static str> {
    FIGURES.iter().map(|(name, ..)| *name)
}

/// One family per usage figure, one sample per key; none without keys.
pub fn families(usage: &[(KeyRecord, UsageSnapshot)]) -> Vec<MetricFamily> {
    if usage.is_empty() {
        return Vec::new();
    }
    FIGURES
        .iter()
        .map(|(name, help, get)| {
            let samples = usage
                .iter()
                .map(|(key, used)| counter_sample(&[("key", &key.name)], get(used) as f64))
                .collect();
            family(name, help, MetricType::COUNTER, samples)
        })
        .collect()
}
