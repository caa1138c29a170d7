//! The simulated fleet: fake engines of mixed speed behind the head's own
//! [`Router`], wired as the head wires it (cache events and load reports
//! forwarded from each node's ledger, a ticket per generation), without
//! QUIC or HTTP.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use superfluid_link::sync::lock;

use anyhow::{anyhow, bail, Result};
use superfluid_head::routing::{NodeKey, RoutePolicy, Router};
use superfluid_node::fake::{FakeCosts, FakeEngine};
use superfluid_node::{Engine, Ledger};
use superfluid_proto::{GenerateEvent, ModelDescription, Outcome};
use tokio::task::JoinHandle;

use super::oracle::Oracle;
use crate::inprocess::greedy;

/// The model id every fake engine serves.
pub const MODEL: &str = "sim-model";
/// How often each node's load report is forwarded to the router.
const LOAD_INTERVAL: Duration = Duration::from_millis(100);

/// The simulated hardware.
#[derive(Debug, Clone, Copy)]
pub struct Hardware {
    pub nodes: usize,
    pub fast_nodes: usize,
    pub fast_speedup: f64,
    pub slots: u32,
    pub ctx: u32,
    /// A 1x node's prompt tokens per second.
    pub prefill_tokens_per_s: f64,
    /// A 1x node's decode steps per second.
    pub decode_steps_per_s: f64,
}

impl Hardware {
    /// Whether node `i` is one of the fast ones (spread evenly).
    pub fn is_fast(&self, i: usize) -> bool {
        if self.fast_nodes == 0 {
            return false;
        }
        let stride = (self.nodes / self.fast_nodes).max(1);
        i % stride == 0 && i / stride < self.fast_nodes
    }

    /// Starts node `i`'s engine.
    pub fn engine(&self, i: usize) -> FakeEngine {
        let speed = if self.is_fast(i) {
            self.fast_speedup
        } else {
            1.0
        };
        let model = ModelDescription {
            id: MODEL.into(),
            ctx: self.ctx,
            slots: self.slots,
            sha256: String::new(),
            ..Default::default()
        };
        FakeEngine::new(
            model,
            FakeCosts {
                prefill_tokens_per_sec: self.prefill_tokens_per_s * speed,
                decode_tokens_per_sec: self.decode_steps_per_s * speed,
            },
        )
    }
}

/// How the simulated head routes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// One of the head's policies, with cache knowledge from the nodes'
    /// reports.
    Head(RoutePolicy),
    /// Least-ttft with exact, instant knowledge of every cache.
    Oracle,
}

impl Policy {
    pub fn name(&self) -> &'static str {
        match self {
            Policy::Head(p) => p.as_str(),
            Policy::Oracle => "oracle",
        }
    }
}

/// One finished generation.
#[derive(Debug)]
pub struct Done {
    pub ttft: Duration,
    pub outcome: Outcome,
    pub tokens: Vec<u32>,
    /// The node it ran on.
    pub node: usize,
    /// The router's predicted time to first token.
    pub predicted_ttft: Duration,
}

/// The fleet of one run: fresh engines (cold caches) and a fresh router.
pub struct Fleet {
    engines: Vec<Arc<FakeEngine>>,
    keys: Vec<NodeKey>,
    router: Arc<Mutex<Router>>,
    oracle: Option<Mutex<Oracle>>,
    feeders: Vec<JoinHandle<()>>,
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for feeder in &self.feeders {
            feeder.abort();
        }
    }
}

/// Now on tokio's clock, as the router is given it.
fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// Forwards one node's cache changes (unless the oracle owns the index)
/// and its load to the router, as the head's Link F listener does.
async fn feed(router: Arc<Mutex<Router>>, key: NodeKey, ledger: Arc<Ledger>, kv: bool) {
    if kv {
        let snapshot = ledger.snapshot();
        lock(&router).apply_kv(key, &snapshot);
    }
    let mut load = tokio::time::interval(LOAD_INTERVAL);
    loop {
        // In a fixed order rather than tokio's random one, so that nothing
        // in a seeded run depends on a draw of its own.
        tokio::select! {
            biased;
            () = ledger.changed() => {
                if let Some(update) = ledger.take() {
                    if kv {
                        lock(&router).apply_kv(key, &update);
                    }
                }
            }
            _ = load.tick() => {
                let report = ledger.load_report();
                lock(&router).apply_load(key, &report);
            }
        }
    }
}

impl Fleet {
    /// Starts `hardware`'s engines and a router with `policy`.
    pub fn start(hardware: &Hardware, policy: Policy, seed: u64) -> Fleet {
        let head_policy = match policy {
            Policy::Head(p) => p,
            Policy::Oracle => RoutePolicy::LeastTtft,
        };
        let router = Arc::new(Mutex::new(Router::new(head_policy, seed)));
        let engines: Vec<Arc<FakeEngine>> = (0..hardware.nodes)
            .map(|i| Arc::new(hardware.engine(i)))
            .collect();
        let keys: Vec<NodeKey> = (0..hardware.nodes as NodeKey).collect();
        let mut feeders = Vec::new();
        for (engine, &key) in engines.iter().zip(&keys) {
            lock(&router).add_node(key, hardware.slots);
            feeders.push(tokio::spawn(feed(
                router.clone(),
                key,
                engine.ledger().clone(),
                policy != Policy::Oracle,
            )));
        }
        Fleet {
            oracle: (policy == Policy::Oracle)
                .then(|| Mutex::new(Oracle::new(MODEL, engines.len()))),
            engines,
            keys,
            router,
            feeders,
        }
    }

    /// The engines, for driving them directly.
    pub fn engines(&self) -> &[Arc<FakeEngine>] {
        &self.engines
    }

    /// Routes and runs one greedy generation, timed from the routing
    /// decision to the first token.
    pub async fn generate(&self, prompt: Vec<u32>, max_tokens: u32) -> Result<Done> {
        let (routed, start) = {
            let mut router = lock(&self.router);
            if let Some(oracle) = &self.oracle {
                lock(oracle).sync(&mut router, &self.keys, &self.engines);
            }
            // Tokio's clock, so a run on paused time drives the router too.
            let start = tokio::time::Instant::now();
            let routed = router.route(MODEL, &prompt, &self.keys, start.into_std());
            (routed.ok_or_else(|| anyhow!("no node to route to"))?, start)
        };
        let finish =
            |completed: bool| lock(&self.router).finished(routed.ticket.clone(), completed, now());
        let node = usize::try_from(routed.node).unwrap_or(usize::MAX);
        let Some(engine) = self.engines.get(node) else {
            finish(false);
            bail!("the router chose an unknown node {}", routed.node);
        };
        let request = greedy(MODEL, prompt, max_tokens, routed.slot);
        let mut generation = match engine.submit(request) {
            Ok(g) => g,
            Err(e) => {
                finish(false);
                bail!("the node refused the generation: {e}");
            }
        };
        let (mut ttft, mut tokens) = (None, Vec::new());
        while let Some(event) = generation.events.recv().await {
            match event {
                GenerateEvent::Tokens(ids) => {
                    if ttft.is_none() {
                        ttft = Some(start.elapsed());
                        lock(&self.router).first_token(&routed.ticket, now());
                    }
                    tokens.extend(ids);
                }
                GenerateEvent::Logprobs(_) => {}
                GenerateEvent::Finished(outcome) => {
                    finish(true);
                    return Ok(Done {
                        ttft: ttft.unwrap_or_else(|| start.elapsed()),
                        outcome,
                        tokens,
                        node,
                        predicted_ttft: Duration::from_secs_f64(
                            routed.predicted_ttft_secs.clamp(0.0, 3600.0),
                        ),
                    });
                }
                GenerateEvent::Failed { message, .. } => {
                    finish(false);
                    bail!("the generation failed: {message}");
                }
            }
        }
        finish(false);
        bail!("the node stopped before the generation finished")
    }
}
