//! The superfluid head: speaks OpenAI's HTTP API to clients and sends each
//! generation over Link F to a node of the fleet.
//!
//! - [`codec`]: per model, the chat template (rendered with minijinja from the
//!   GGUF metadata), the tokenizer (the model's own, via llama.cpp with only
//!   the vocabulary loaded), incremental detokenization and stop strings.
//! - [`api`]: the axum routes, OpenAI request/response types, and the one
//!   place errors become HTTP responses.
//! - [`fleet`]: the registry of connected nodes, the Link F listener, and
//!   dispatch of one generation to one node.
//! - [`keys`]: API keys for the client APIs: hashes in memory and in
//!   `keys.db` in the head's data dir, usage counters, safe binding.
//! - [`membership`]: the fleet key, join tokens, enrolled and revoked node
//!   keys, persisted in the head's data dir.
//! - [`metrics`]: the head's counters, which the fleet updates; the
//!   Prometheus page that shows them with each node's gauges is
//!   [`api::metrics_page`].
//! - [`routing`]: the index of which node holds which cached prompt blocks,
//!   the load each node carries, and the policies that pick a node.
//! - [`server`]: starting a head: codecs, Link F listener, HTTP.
//! - [`sessions`]: the conversations the head keeps, in SQLite with group
//!   commit.
#![forbid(unsafe_code)]

pub mod api;
pub mod codec;
pub mod fleet;
pub mod keys;
pub mod membership;
pub mod metrics;
pub mod routing;
pub mod server;
pub mod sessions;
