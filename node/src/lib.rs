//! The superfluid node: hosts an inference engine and serves the head over Link F.
//!
//! The engine ([`engine::Engine`]) is reached over channels.
//! [`llama::LlamaEngine`] runs real models with llama.cpp on its own OS
//! thread; [`fake::FakeEngine`] models prefill and decode costs for
//! fleet-logic tests as a tokio task. Both run one slot scheduler
//! ([`schedule::Scheduler`]) over their own [`schedule::Backend`].
//! The [`agent`] dials the head, says hello, and answers each generation
//! stream by submitting it to the engine. Each engine reports its KV caches
//! (as block hashes) and its load to a [`ledger::Ledger`], which the agent
//! relays to the head on the control stream. A node started without a
//! model fetches the head's into its [`model_cache::ModelCache`] first.
//! A node may serve several models at once ([`models::ModelSet`]), loading
//! and unloading them as the head places them.

pub mod agent;
pub mod credential;
pub mod engine;
pub mod fake;
pub mod hardware;
pub mod host;
pub mod ledger;
pub mod llama;
pub mod model_cache;
pub mod models;
pub mod offload;
pub mod schedule;
pub mod scoring;

pub use engine::{Engine, EngineError, EngineInfo, Generation};
pub use ledger::Ledger;
