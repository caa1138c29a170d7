//! What every server-sent-event stream of the head shares, whichever API
//! it speaks: one keep-alive interval, so a proxy that closes idle
//! connections treats every dialect's stream alike.

use axum::response::sse::KeepAlive;
use std::time::Duration;

/// How long a stream may be silent (a long prefill, a move to another
/// node) before a comment line keeps the connection open.
pub const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(10);

/// The keep-alive every stream is sent with.
pub fn keep_alive() -> KeepAlive {
    KeepAlive::new().interval(KEEP_ALIVE_INTERVAL)
}
