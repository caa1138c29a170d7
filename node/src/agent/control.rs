//! The node's side of the control stream after the hello: heartbeats, each
//! loaded model's KV cache updates and load reports, the models it serves
//! after each load or unload, and whatever else the agent queues (fetch
//! progress, failed loads), all from one writer.

use std::sync::Arc;
use std::time::Duration;

use futures::future::select_all;
use superfluid_link::{control::HEARTBEAT_INTERVAL, quinn::SendStream, write_frame, FrameIoError};
use superfluid_proto::{ControlMsg, KvEvent, KvUpdate, LoadReport};
use tokio::sync::mpsc;
use tokio::time::MissedTickBehavior;

use crate::ledger::Ledger;
use crate::models::ModelSet;

/// How often the load is checked and, when it changed, reported.
pub const LOAD_INTERVAL: Duration = Duration::from_millis(250);

/// Block hashes per `Kv` message at most, so that even a very large cache
/// state stays well under the frame limit.
const MAX_BLOCKS_PER_MESSAGE: usize = 100_000;

/// Owns the control stream's send side: first each model's full cache
/// state and load, then heartbeats every [`HEARTBEAT_INTERVAL`] (each with
/// the loads), cache changes as soon as an engine makes them, the loads
/// every [`LOAD_INTERVAL`] when they changed, a models report after each
/// load or unload (with the new model's cache state), and what `outbox`
/// carries. Returns when a write fails (the connection is gone).
pub(super) async fn write_control(
    mut send: SendStream,
    models: Arc<ModelSet>,
    outbox: mpsc::Receiver<ControlMsg>,
) {
    if let Err(e) = run(&mut send, &models, outbox).await {
        tracing::debug!(error = %e, "the control stream ended");
    }
}

/// The ledgers of the loaded models and the loads last reported for them.
struct Reported {
    ledgers: Vec<Arc<Ledger>>,
    loads: Vec<LoadReport>,
}

impl Reported {
    /// Reports the full state of every model not reported before.
    async fn refresh(
        &mut self,
        send: &mut SendStream,
        models: &ModelSet,
    ) -> Result<(), FrameIoError> {
        let now: Vec<Arc<Ledger>> = models
            .engines()
            .iter()
            .map(|e| e.ledger().clone())
            .collect();
        let mut loads = Vec::with_capacity(now.len());
        for ledger in &now {
            let known = self.ledgers.iter().position(|l| Arc::ptr_eq(l, ledger));
            match known {
                Some(i) => loads.push(self.loads[i].clone()),
                None => {
                    write_kv(send, ledger.snapshot()).await?;
                    let load = ledger.load_report();
                    write_frame(send, &ControlMsg::Load(load.clone())).await?;
                    loads.push(load);
                }
            }
        }
        self.ledgers = now;
        self.loads = loads;
        Ok(())
    }

    /// Sends every model's load, or only those that changed.
    async fn loads(&mut self, send: &mut SendStream, all: bool) -> Result<(), FrameIoError> {
        for (ledger, last) in self.ledgers.iter().zip(self.loads.iter_mut()) {
            let now = ledger.load_report();
            if all || now != *last {
                write_frame(send, &ControlMsg::Load(now.clone())).await?;
                *last = now;
            }
        }
        Ok(())
    }
}

async fn run(
    send: &mut SendStream,
    models: &ModelSet,
    mut outbox: mpsc::Receiver<ControlMsg>,
) -> Result<(), FrameIoError> {
    let mut changes = models.subscribe();
    changes.mark_unchanged();
    let mut reported = Reported {
        ledgers: Vec::new(),
        loads: Vec::new(),
    };
    reported.refresh(send, models).await?;
    let mut heartbeat = tokio::time::interval(HEARTBEAT_INTERVAL);
    heartbeat.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut load = tokio::time::interval(LOAD_INTERVAL);
    load.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut outbox_open = true;
    loop {
        let kv_changed = async {
            if reported.ledgers.is_empty() {
                std::future::pending::<usize>().await
            } else {
                select_all(reported.ledgers.iter().map(|l| Box::pin(l.changed())))
                    .await
                    .1
            }
        };
        tokio::select! {
            _ = heartbeat.tick() => {
                write_frame(send, &ControlMsg::Heartbeat).await?;
                reported.loads(send, true).await?;
            }
            i = kv_changed => {
                if let Some(update) = reported.ledgers.get(i).and_then(|l| l.take()) {
                    write_kv(send, update).await?;
                }
            }
            _ = load.tick() => {
                // A model whose engine host kept dying leaves the set; the
                // models report that follows tells the head.
                models.drop_failed();
                reported.loads(send, false).await?;
            }
            changed = changes.changed() => {
                if changed.is_err() {
                    return Ok(());
                }
                reported.refresh(send, models).await?;
                write_frame(send, &super::place::report(models, None)).await?;
            }
            msg = outbox.recv(), if outbox_open => match msg {
                Some(msg) => write_frame(send, &msg).await?,
                None => outbox_open = false,
            },
        }
    }
}

/// Writes `update` as one `Kv` message, or several in order when it is large.
async fn write_kv(send: &mut SendStream, update: KvUpdate) -> Result<(), FrameIoError> {
    for part in split(update, MAX_BLOCKS_PER_MESSAGE) {
        write_frame(send, &ControlMsg::Kv(part)).await?;
    }
    Ok(())
}

/// Cuts `update` into consecutive updates of at most about `max_blocks`
/// block hashes each; applying them in order equals applying `update`.
fn split(update: KvUpdate, max_blocks: usize) -> Vec<KvUpdate> {
    let size = |event: &KvEvent| match event {
        KvEvent::Stored { blocks, .. } | KvEvent::Removed { blocks, .. } => blocks.len(),
        KvEvent::Cleared { .. } => 0,
    };
    let total: usize = update.events.iter().map(size).sum();
    if total <= max_blocks {
        return vec![update];
    }
    let mut parts = Vec::new();
    let mut events = Vec::new();
    let mut count = 0;
    for event in update.events {
        let mut event = event;
        // A long `Stored` is itself cut: its pieces append in order.
        while let KvEvent::Stored { slot, blocks } = &mut event {
            if count + blocks.len() <= max_blocks {
                break;
            }
            let room = max_blocks - count;
            let rest = blocks.split_off(room);
            let head = std::mem::replace(blocks, rest);
            let slot = *slot;
            if !head.is_empty() {
                events.push(KvEvent::Stored { slot, blocks: head });
            }
            parts.push(std::mem::take(&mut events));
            count = 0;
        }
        count += size(&event);
        events.push(event);
    }
    if !events.is_empty() {
        parts.push(events);
    }
    parts
        .into_iter()
        .map(|events| KvUpdate {
            model: update.model.clone(),
            events,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_large_update_is_split_in_order_without_losing_blocks() {
        let update = KvUpdate {
            model: "m".into(),
            events: vec![
                KvEvent::Cleared { slot: 0 },
                KvEvent::Stored {
                    slot: 0,
                    blocks: (0..25).collect(),
                },
                KvEvent::Cleared { slot: 1 },
                KvEvent::Stored {
                    slot: 1,
                    blocks: (100..103).collect(),
                },
            ],
        };
        assert_eq!(split(update.clone(), 100), vec![update.clone()]);
        let parts = split(update.clone(), 10);
        assert!(parts.len() >= 3);
        for part in &parts {
            assert_eq!(part.model, "m");
            let n: usize = part
                .events
                .iter()
                .map(|e| match e {
                    KvEvent::Stored { blocks, .. } => blocks.len(),
                    _ => 0,
                })
                .sum();
            assert!(n <= 10, "{n}");
        }
        // Replaying the parts gives the same chains as the whole update.
        let replay = |events: &mut dyn Iterator<Item = KvEvent>| {
            let mut chains = vec![Vec::new(); 2];
            for event in events {
                match event {
                    KvEvent::Cleared { slot } => chains[slot as usize].clear(),
                    KvEvent::Stored { slot, blocks } => chains[slot as usize].extend(blocks),
                    KvEvent::Removed { .. } => unreachable!(),
                }
            }
            chains
        };
        let whole = replay(&mut update.events.into_iter());
        let pieces = replay(&mut parts.into_iter().flat_map(|p| p.events));
        assert_eq!(whole, pieces);
    }
}
