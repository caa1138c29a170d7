//! End-to-end tests of the `superfluid` binary: real processes, real QUIC,
//! the real default model (see `scripts/setup`).

mod support;

mod anthropic_api;
mod anthropic_tools;
mod browser;
mod cross_api_cache;
mod embeddings;
mod fleet_failover;
mod fleet_failover_sampled;
mod fleet_mdns;
mod fleet_membership;
mod fleet_models;
mod fleet_overload;
mod fleet_partition;
mod fleet_routing;
mod fleet_shutdown;
mod fleet_support;
mod fleet_transfer;
mod fleet_transfer_cuts;
mod idempotency;
mod keys;
mod keys_limits;
mod log_format;
mod metrics;
mod netns;
mod ollama_api;
mod ollama_tools;
mod python_clients;
mod responses_api;
mod scrape;
mod serve_chat;
mod serve_completions;
mod serve_errors;
mod serve_logprobs;
mod serve_sampling;
mod serve_shutdown;
mod serve_structured;
mod serve_tools;
mod sessions_api;
mod sessions_corruption;
mod sessions_crash;
mod sessions_limits;
mod status_page;
mod stop_support;
mod top;
