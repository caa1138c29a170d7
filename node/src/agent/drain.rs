//! Stopping without cutting generations off: once the node drains, it
//! refuses new generation streams (the head sends those to another node)
//! and waits for the running ones to finish.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use superfluid_link::control::STREAM_NODE_STOPPING;
use superfluid_link::quinn::{RecvStream, SendStream};
use tokio::sync::Notify;

/// The longest a stopping node waits for its running generations.
pub const DRAIN_GRACE: Duration = Duration::from_secs(30);

/// Whether the node drains, and how many generations it runs.
#[derive(Debug, Default)]
pub(super) struct Drain {
    draining: AtomicBool,
    running: Arc<Count>,
}

/// Generations running, and a notifier for when none is.
#[derive(Debug, Default)]
struct Count {
    n: AtomicUsize,
    idle: Notify,
}

/// Counts one running generation until dropped.
pub(super) struct Running(Arc<Count>);

impl Drop for Running {
    fn drop(&mut self) {
        if self.0.n.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

impl Drain {
    /// Whether new generations are refused.
    pub(super) fn is_draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }

    /// Refuses new generations from now on; returns how many still run.
    pub(super) fn start(&self) -> usize {
        self.draining.store(true, Ordering::SeqCst);
        self.running()
    }

    /// Generations running now.
    pub(super) fn running(&self) -> usize {
        self.running.n.load(Ordering::SeqCst)
    }

    /// Counts a generation as running until the returned guard is dropped.
    pub(super) fn track(&self) -> Running {
        self.running.n.fetch_add(1, Ordering::SeqCst);
        Running(self.running.clone())
    }

    /// Completes once no generation runs.
    pub(super) async fn finished(&self) {
        loop {
            // Registered before the count is read, so a last generation
            // ending in between still wakes this.
            let idle = self.running.idle.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            if self.running() == 0 {
                return;
            }
            idle.await;
        }
    }
}

/// Turns away a generation stream the head opened while the node drains.
pub(super) fn refuse(mut send: SendStream, mut recv: RecvStream) {
    let _ = recv.stop(STREAM_NODE_STOPPING);
    let _ = send.reset(STREAM_NODE_STOPPING);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn finished_waits_for_every_running_generation() {
        let drain = Drain::default();
        let (a, b) = (drain.track(), drain.track());
        assert!(!drain.is_draining());
        assert_eq!(drain.start(), 2);
        assert!(drain.is_draining());
        drop(a);
        let waiting = tokio::time::timeout(Duration::from_millis(100), drain.finished()).await;
        assert!(waiting.is_err(), "one generation still runs");
        drop(b);
        let done = tokio::time::timeout(Duration::from_secs(1), drain.finished()).await;
        assert!(done.is_ok(), "no generation runs");
        assert_eq!(drain.running(), 0);
    }
}
