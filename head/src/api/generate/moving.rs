//! Moving a generation whose node was lost or stalled to another node,
//! and measuring the pause that left in the client's stream.

use std::time::Instant;

use super::failover::{Cause, Stuck};
use super::Generation;
use crate::api::output::{FinishReason, Step};
use crate::api::ApiError;
use crate::fleet::FleetError;

impl Generation {
    /// After the node was given up for `cause` (`lost` says how), moves the
    /// generation to another node: `Ok(None)` to read on from there,
    /// `Ok(Some(step))` when every token asked for had come and only the
    /// end was lost, or the error to answer with.
    pub(super) async fn move_on(
        &mut self,
        cause: Cause,
        lost: FleetError,
    ) -> Result<Option<Step>, ApiError> {
        self.remote = None;
        let Some(relay) = self.relay.as_mut() else {
            self.timing.end();
            return Err(lost.into());
        };
        let moved = relay.move_on(&self.generated, lost).await;
        let entered = self.span.enter();
        match moved {
            Ok(remote) => {
                let metrics = relay.fleet().metrics();
                let detection = self.last_event.elapsed().as_secs_f64();
                metrics.failover.record_move(cause.as_str(), detection);
                if self.generated.is_empty() {
                    metrics.record_retried();
                } else {
                    self.gap_from = Some(self.last_event);
                }
                tracing::warn!(
                    cause = cause.as_str(),
                    from = %self.node,
                    to = %remote.node_name,
                    generated = self.generated.len(),
                    "moved the generation to another node"
                );
                self.node = remote.node_name.clone();
                self.span.record("node", self.node.as_str());
                self.remote = Some(Box::new(remote));
                self.watchdog.restart();
                self.last_event = Instant::now();
                Ok(None)
            }
            Err(Stuck::Complete) => {
                drop(entered);
                let rest = self.end_with(FinishReason::Length);
                Ok(Some(
                    rest.map_or(Step::Done(FinishReason::Length), Step::Text),
                ))
            }
            Err(Stuck::Failed(error)) => {
                tracing::warn!(cause = cause.as_str(), %error, "lost the node, and no other node took the generation over");
                self.timing.end();
                Err(error.into())
            }
        }
    }

    /// Observes the gap a move made in the client's stream, at the first
    /// token after it.
    pub(super) fn end_gap(&mut self) {
        if let (Some(from), Some(relay)) = (self.gap_from.take(), self.relay.as_ref()) {
            let gap = from.elapsed().as_secs_f64();
            relay.fleet().metrics().failover.gap.observe(gap);
        }
    }
}
