//! The fake engine's task: drives the scheduler on tokio's clock, each step
//! taking the time the modelled hardware would.

use std::time::Duration;

use tokio::sync::mpsc::UnboundedReceiver;
use tokio::time::Instant;

use super::backend::FakeBackend;
use super::FakeCosts;
use crate::schedule::{Job, Scheduler, StepPlan};

/// The most a busy engine catches up on: a task kept waiting for longer
/// loses the time instead of rushing the steps after it.
const MAX_CATCH_UP: Duration = Duration::from_millis(20);

/// The longest one step may take, whatever the costs say.
const MAX_STEP_SECS: f64 = 3600.0;

/// When a step of `cost` that begins at `now` ends in modelled time: after
/// the previous step's end `last` if the engine is still busy and not more
/// than [`MAX_CATCH_UP`] behind, else after `now`.
pub(super) fn step_end(last: Option<Instant>, now: Instant, cost: Duration) -> Instant {
    let start = last
        .filter(|&end| now.saturating_duration_since(end) <= MAX_CATCH_UP)
        .unwrap_or(now);
    start + cost
}

/// Seconds the modelled hardware takes for `plan`: its prompt tokens at the
/// prefill rate, plus one decode step if any slot decodes (a step yields a
/// token for every decoding slot at once).
pub(super) fn step_seconds(costs: &FakeCosts, plan: StepPlan) -> f64 {
    let mut seconds = plan.prefilled as f64 / costs.prefill_tokens_per_sec.max(f64::MIN_POSITIVE);
    if plan.decoded > 0 {
        seconds += 1.0 / costs.decode_tokens_per_sec.max(f64::MIN_POSITIVE);
    }
    seconds.min(MAX_STEP_SECS)
}

/// Steps until every sender is gone and no work is left. Each step ends
/// where the previous one ended plus its modelled cost (so wakeups that
/// come late do not add up), and the ledger records the modelled time.
pub async fn serve(
    mut scheduler: Scheduler<FakeBackend>,
    mut backend: FakeBackend,
    mut jobs: UnboundedReceiver<Job>,
    costs: FakeCosts,
) {
    // When the last step ended in modelled time, while the engine is busy.
    let mut clock: Option<Instant> = None;
    loop {
        if !scheduler.busy() {
            clock = None;
            match jobs.recv().await {
                Some(job) => scheduler.push(job),
                None => return,
            }
        }
        while let Ok(job) = jobs.try_recv() {
            scheduler.push(job);
        }
        // Without a plan nothing runs, so the engine is idle again.
        let Some(plan) = scheduler.plan(&mut backend) else {
            continue;
        };
        let seconds = step_seconds(&costs, plan);
        let end = step_end(clock, Instant::now(), Duration::from_secs_f64(seconds));
        tokio::time::sleep_until(end).await;
        clock = Some(end);
        scheduler.finish_step(&mut backend, || seconds);
    }
}
