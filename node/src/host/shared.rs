//! What the agent's side of a host keeps between the engine's callers and
//! the host process: the requests in flight by number, the requests that
//! wait for a host to come back, the link to the live host, and the
//! progress watchdog. Every frame a host sends is checked here.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use superfluid_link::sync::lock;
use superfluid_proto::watchdog::Watchdog;
use superfluid_proto::{EmbedReply, FailureKind, GenerateEvent};
use tokio::sync::mpsc::{UnboundedSender, WeakUnboundedSender};
use tokio::sync::oneshot;

use super::wire::{FromHost, ToHost};
use crate::ledger::Ledger;

/// A request in flight: where its answer goes.
enum Waiter {
    Generation(UnboundedSender<GenerateEvent>),
    Embedding(oneshot::Sender<EmbedReply>),
}

#[derive(Default)]
struct Inner {
    next_id: u64,
    /// The live host's outbox; `None` while it is being (re)started.
    link: Option<UnboundedSender<ToHost>>,
    /// Requests taken while no host was up, sent when one is.
    waiting: Vec<ToHost>,
    in_flight: HashMap<u64, Waiter>,
    /// Set when the model was given up on: why.
    failed: Option<String>,
    /// The live host's process id.
    pid: Option<u32>,
    watchdog: Watchdog,
}

/// The agent's side of one model's host; shared by the engine and its
/// supervisor.
pub struct Shared {
    model: String,
    ledger: Arc<Ledger>,
    inner: Mutex<Inner>,
}

impl Shared {
    /// The side of `model`'s first host, process `pid`.
    pub fn new(model: String, ledger: Arc<Ledger>, pid: Option<u32>) -> Arc<Self> {
        Arc::new(Self {
            model,
            ledger,
            inner: Mutex::new(Inner {
                pid,
                ..Inner::default()
            }),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        lock(&self.inner)
    }

    pub fn model(&self) -> &str {
        &self.model
    }

    /// The live host's process id, if one is up.
    pub fn pid(&self) -> Option<u32> {
        self.lock().pid
    }

    /// Why the model was given up on, if it was.
    pub fn failure(&self) -> Option<String> {
        self.lock().failed.clone()
    }

    /// Numbers a generation and sends it (or keeps it for the next host).
    /// `Err` with the reason when the model was given up on.
    pub fn generate(
        self: &Arc<Self>,
        request: superfluid_proto::GenerateRequest,
        events: UnboundedSender<GenerateEvent>,
    ) -> Result<(), String> {
        let watch = events.downgrade();
        let id = self.send(Waiter::Generation(events), |id| ToHost::Generate {
            id,
            request,
        })?;
        let shared = Arc::downgrade(self);
        tokio::spawn(async move {
            if let Some(events) = WeakUnboundedSender::upgrade(&watch) {
                events.closed().await;
            }
            if let Some(shared) = shared.upgrade() {
                shared.cancel(id);
            }
        });
        Ok(())
    }

    /// Numbers an embeddings request and sends it (or keeps it).
    pub fn embed(
        self: &Arc<Self>,
        request: superfluid_proto::EmbedRequest,
        reply: oneshot::Sender<EmbedReply>,
    ) -> Result<(), String> {
        self.send(Waiter::Embedding(reply), |id| ToHost::Embed { id, request })
            .map(drop)
    }

    fn send(&self, waiter: Waiter, message: impl FnOnce(u64) -> ToHost) -> Result<u64, String> {
        let mut inner = self.lock();
        if let Some(reason) = &inner.failed {
            return Err(reason.clone());
        }
        let id = inner.next_id;
        inner.next_id += 1;
        inner.in_flight.insert(id, waiter);
        let message = message(id);
        let unsent = match &inner.link {
            Some(link) => link.send(message).err().map(|e| e.0),
            None => Some(message),
        };
        inner.waiting.extend(unsent);
        Ok(id)
    }

    /// The caller of request `id` went away: the host stops it.
    fn cancel(&self, id: u64) {
        let mut inner = self.lock();
        if inner.in_flight.remove(&id).is_none() {
            return;
        }
        inner.waiting.retain(|m| !is_for(m, id));
        if let Some(link) = &inner.link {
            let _ = link.send(ToHost::Cancel { id });
        }
        if inner.in_flight.is_empty() {
            inner.watchdog.restart();
        }
    }

    /// A new host is up: it gets what waited for it, then everything new.
    pub fn attach(&self, link: UnboundedSender<ToHost>, pid: Option<u32>) {
        let mut inner = self.lock();
        inner.pid = pid;
        for message in std::mem::take(&mut inner.waiting) {
            let _ = link.send(message);
        }
        inner.link = Some(link);
        inner.watchdog.restart();
    }

    /// Takes one frame from the host.
    ///
    /// # Errors
    /// Why the frame makes no sense; the host that sent it is ended.
    pub fn deliver(&self, message: FromHost) -> Result<(), String> {
        match message {
            FromHost::Event { id, event } => {
                let mut inner = self.lock();
                let last = !matches!(event, GenerateEvent::Tokens(_) | GenerateEvent::Logprobs(_));
                if matches!(event, GenerateEvent::Tokens(_)) {
                    inner.watchdog.tokens();
                }
                let waiter = if last {
                    inner.in_flight.remove(&id)
                } else {
                    None
                };
                match (waiter, inner.in_flight.get(&id)) {
                    (Some(Waiter::Generation(events)), _) => {
                        let _ = events.send(event);
                    }
                    (None, Some(Waiter::Generation(events))) => {
                        let _ = events.send(event);
                    }
                    (Some(Waiter::Embedding(_)), _) | (None, Some(Waiter::Embedding(_))) => {
                        return Err(format!(
                            "it sent generation events for embeddings request {id}"
                        ));
                    }
                    // A request cancelled a moment ago.
                    (None, None) if id < inner.next_id => {}
                    (None, None) => {
                        return Err(format!(
                            "it sent events for request {id}, which it was never given"
                        ))
                    }
                }
                if last && inner.in_flight.is_empty() {
                    inner.watchdog.restart();
                }
                Ok(())
            }
            FromHost::Embedded { id, reply } => {
                let mut inner = self.lock();
                match inner.in_flight.remove(&id) {
                    Some(Waiter::Embedding(tx)) => {
                        let _ = tx.send(reply);
                    }
                    Some(Waiter::Generation(_)) => {
                        return Err(format!("it sent an embeddings reply to generation {id}"))
                    }
                    None if id < inner.next_id => {}
                    None => {
                        return Err(format!(
                            "it answered request {id}, which it was never given"
                        ))
                    }
                }
                Ok(())
            }
            FromHost::Kv(update) => self
                .ledger
                .apply(&update.model, update.events)
                .map_err(|e| e.to_string()),
            FromHost::Load(report) if report.model == self.model => {
                self.ledger.set_report(&report);
                Ok(())
            }
            FromHost::Load(report) => Err(format!(
                "it reported the load of model {:?}, not {:?}",
                report.model, self.model
            )),
            FromHost::Ready { .. } | FromHost::LoadFailed { .. } => {
                Err("it said hello a second time".into())
            }
        }
    }

    /// Whether requests run and the host has made no progress on them for
    /// longer than the watchdog allows.
    pub fn stalled(&self, now: Instant) -> bool {
        let inner = self.lock();
        !inner.in_flight.is_empty() && inner.link.is_some() && inner.watchdog.stalled_at(now)
    }

    /// The host is gone: every request it held fails as the node's
    /// stopping (so the head moves generations to another node), its KV
    /// caches are empty, and new requests wait for the next host.
    pub fn host_lost(&self, why: &str) {
        let lost: Vec<Waiter> = {
            let mut inner = self.lock();
            inner.link = None;
            inner.pid = None;
            inner.watchdog.restart();
            let waiting: std::collections::HashSet<u64> =
                inner.waiting.iter().filter_map(id_of).collect();
            let ids: Vec<u64> = inner
                .in_flight
                .keys()
                .copied()
                .filter(|id| !waiting.contains(id))
                .collect();
            ids.iter()
                .filter_map(|id| inner.in_flight.remove(id))
                .collect()
        };
        let message = format!(
            "the engine host of model {} {why}; the node restarts it",
            self.model
        );
        fail_all(lost, FailureKind::Stopped, &message);
        self.ledger.reset();
    }

    /// The model is given up on: every request, waiting or not, fails with
    /// `why`, and so does every later one.
    pub fn give_up(&self, why: String) {
        let lost: Vec<Waiter> = {
            let mut inner = self.lock();
            inner.link = None;
            inner.pid = None;
            inner.waiting.clear();
            inner.failed = Some(why.clone());
            inner.in_flight.drain().map(|(_, w)| w).collect()
        };
        fail_all(lost, FailureKind::Stopped, &why);
        self.ledger.reset();
    }
}

fn fail_all(lost: Vec<Waiter>, kind: FailureKind, message: &str) {
    for waiter in lost {
        let message = message.to_owned();
        match waiter {
            Waiter::Generation(events) => {
                let _ = events.send(GenerateEvent::Failed { kind, message });
            }
            Waiter::Embedding(reply) => {
                let _ = reply.send(EmbedReply::Failed { kind, message });
            }
        }
    }
}

fn id_of(message: &ToHost) -> Option<u64> {
    match message {
        ToHost::Generate { id, .. } | ToHost::Embed { id, .. } => Some(*id),
        ToHost::Cancel { .. } => None,
    }
}

fn is_for(message: &ToHost, id: u64) -> bool {
    id_of(message) == Some(id)
}
