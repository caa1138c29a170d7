//! Warm-prefix routing: which node runs a generation.
//!
//! The head tokenizes every prompt itself, so it knows the block hashes (see
//! [`superfluid_proto::blocks`]) a node computes for it. Nodes report each
//! change to their caches; the [`BlockIndex`] replays those reports exactly,
//! from block hash to the (node, slot)s holding it.
//!
//! - [`route`] is a pure function: given a request, a snapshot of the
//!   candidate nodes ([`NodeView`]) and the index, a [`RoutePolicy`] picks
//!   one and says why ([`Reason`]). The default, least-ttft, predicts each
//!   node's time to first token from its cached prefix, its queue and its
//!   measured speed (the model is documented in [`policy`]).
//! - [`Router`] holds the index, the load of every node (generations routed
//!   and not finished, prompt tokens not yet computed, reported rates) and
//!   the policy; each routed generation carries a [`Ticket`] that is handed
//!   back when its first token arrives and when it ends.

pub mod admission;
mod holders;
pub mod index;
pub mod policy;
mod predict;
pub mod router;

#[cfg(test)]
mod index_limit_tests;
#[cfg(test)]
mod index_model_tests;
#[cfg(test)]
mod index_tests;
#[cfg(test)]
mod policy_tests;
#[cfg(test)]
mod predict_tests;
#[cfg(test)]
mod router_tests;

pub use admission::{Admission, Busy};
pub use index::{BlockIndex, Match};
pub use policy::{route, Decision, Reason, RoutePolicy, RouteRequest, RouterState};
pub use predict::{NodeView, DEFAULT_DECODE_TOKENS_PER_SEC, DEFAULT_PREFILL_TOKENS_PER_SEC};
pub use router::{NodeLoad, Routed, Router, Ticket};

/// The head's number for one node connection.
pub type NodeKey = u64;
