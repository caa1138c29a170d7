//! End-to-end tests of the `superfluid` binary: real processes, real QUIC,
//! the real default model (see `scripts/setup`).

mod support;

mod serve_chat;
mod serve_completions;
mod serve_errors;
