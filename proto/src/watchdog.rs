//! The progress watchdog: when a stream of generated tokens has stalled.
//!
//! The head watches each node's generation stream with it, and a node
//! watches each of its engine hosts with it: a peer that answers keep-alives
//! (or keeps its socket open) but makes no progress (a hung engine thread, a
//! frozen device) would otherwise hold its generations forever. Once tokens
//! have flowed, the watchdog knows the step time and gives up when nothing
//! comes for [`STALL_STEPS`] of the slowest step seen, and at least
//! [`STALL_FLOOR`]. Before the first token it waits: a prompt's prefill and
//! a queue have no step time to measure against.

use std::time::{Duration, Instant};

/// How long a stream may go without an event before the watchdog may give
/// up on it, however fast its engine has been. A step that shares the batch
/// with another request's prefill chunk is many decode steps long; this
/// stays well above any such step on a loaded two-core machine.
pub const STALL_FLOOR: Duration = Duration::from_secs(10);

/// How many of the slowest step seen so far a stream may wait before the
/// watchdog gives up on it.
pub const STALL_STEPS: u32 = 20;

/// The progress watchdog of one stream; see the module docs.
#[derive(Debug, Default, Clone)]
pub struct Watchdog {
    last: Option<Instant>,
    slowest: Duration,
}

impl Watchdog {
    /// A new stream: nothing measured yet.
    pub fn restart(&mut self) {
        *self = Watchdog::default();
    }

    /// Tokens arrived now.
    pub fn tokens(&mut self) {
        self.tokens_at(Instant::now());
    }

    /// Tokens arrived at `now`.
    pub fn tokens_at(&mut self, now: Instant) {
        if let Some(last) = self.last {
            self.slowest = self.slowest.max(now.saturating_duration_since(last));
        }
        self.last = Some(now);
    }

    /// How long the next event may take, or `None` for no limit.
    pub fn limit(&self) -> Option<Duration> {
        self.last?;
        Some(STALL_FLOOR.max(self.slowest.saturating_mul(STALL_STEPS)))
    }

    /// Whether, at `now`, the stream has gone past its limit without tokens.
    pub fn stalled_at(&self, now: Instant) -> bool {
        match (self.last, self.limit()) {
            (Some(last), Some(limit)) => now.saturating_duration_since(last) > limit,
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_watchdog_waits_without_limit_until_the_first_token() {
        let mut dog = Watchdog::default();
        assert_eq!(dog.limit(), None);
        assert!(!dog.stalled_at(Instant::now() + Duration::from_secs(3600)));
        dog.tokens();
        assert_eq!(dog.limit(), Some(STALL_FLOOR));
        dog.restart();
        assert_eq!(dog.limit(), None);
    }

    #[test]
    fn a_slow_stream_gets_a_longer_watchdog_than_the_floor() {
        let start = Instant::now();
        let mut dog = Watchdog::default();
        dog.tokens_at(start);
        dog.tokens_at(start + Duration::from_secs(1));
        assert_eq!(dog.limit(), Some(Duration::from_secs(20)));
        let last = start + Duration::from_secs(1);
        assert!(!dog.stalled_at(last + Duration::from_secs(19)));
        assert!(dog.stalled_at(last + Duration::from_secs(21)));
    }
}
