//! Driving the simulated fleet: the chat workload, the no-reuse control,
//! and the calibration of the fleet's slow-path capacity.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Result};
use superfluid_head::routing::RoutePolicy;
use superfluid_node::Engine;
use superfluid_proto::GenerateEvent;
use tokio::task::JoinSet;
use tokio::time::{sleep_until, Instant};

use super::report::SimPolicy;
use super::rng::Rng;
use super::sim::{Done, Fleet, Hardware, Policy, MODEL};
use super::workload::{Chats, Single};
use crate::inprocess::greedy;
use crate::stats::percentile;

/// Time for the fleet's feeders to send their first snapshots.
const SETTLE: Duration = Duration::from_millis(50);

/// One finished generation, as the summary needs it.
struct Measured {
    ttft_ms: f64,
    predicted_ms: f64,
    prompt: u32,
    cached: u32,
    fast: bool,
}

type Sample = Result<Measured>;

fn sample(hw: &Hardware, done: &Done) -> Measured {
    Measured {
        ttft_ms: done.ttft.as_secs_f64() * 1e3,
        predicted_ms: done.predicted_ttft.as_secs_f64() * 1e3,
        prompt: done.outcome.prompt_tokens,
        cached: done.outcome.cached_tokens,
        fast: hw.is_fast(done.node),
    }
}

fn summarise(policy: Policy, samples: Vec<Sample>, elapsed: Duration) -> SimPolicy {
    let mut ttft = Vec::new();
    let (mut computed, mut avoided, mut failed) = (0u64, 0u64, 0usize);
    let (mut fast, mut error_ms) = (0usize, Vec::new());
    for s in samples {
        match s {
            Ok(m) => {
                ttft.push(m.ttft_ms);
                computed += u64::from(m.prompt.saturating_sub(m.cached));
                avoided += u64::from(m.cached);
                fast += usize::from(m.fast);
                error_ms.push(m.ttft_ms - m.predicted_ms);
            }
            Err(e) => {
                if failed == 0 {
                    eprintln!("{}: a generation failed: {e:#}", policy.name());
                }
                failed += 1;
            }
        }
    }
    let n = ttft.len().max(1) as f64;
    let mean = ttft.iter().sum::<f64>() / n;
    SimPolicy {
        policy: policy.name().into(),
        requests: ttft.len(),
        failed,
        ttft_p50_ms: percentile(&mut ttft, 0.5),
        ttft_p90_ms: percentile(&mut ttft, 0.9),
        ttft_p99_ms: percentile(&mut ttft, 0.99),
        ttft_mean_ms: mean,
        prefill_tokens_computed: computed,
        prefill_tokens_avoided: avoided,
        fast_node_share: fast as f64 / n,
        ttft_minus_predicted_p50_ms: percentile(&mut error_ms, 0.5),
        elapsed_s: elapsed.as_secs_f64(),
    }
}

async fn collect(mut tasks: JoinSet<Vec<Sample>>) -> Vec<Sample> {
    let mut all = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        match joined {
            Ok(samples) => all.extend(samples),
            Err(e) => all.push(Err(e.into())),
        }
    }
    all
}

/// The chat workload on a fresh fleet routed by `policy`: each
/// conversation starts at its arrival time, and each turn is sent its think
/// time after the previous answer, carrying the whole history.
pub async fn chats(hw: &Hardware, policy: Policy, seed: u64, chats: &Arc<Chats>) -> SimPolicy {
    let fleet = Arc::new(Fleet::start(hw, policy, seed));
    tokio::time::sleep(SETTLE).await;
    let t0 = Instant::now();
    let mut tasks = JoinSet::new();
    for index in 0..chats.conversations.len() {
        let (fleet, chats, hw) = (fleet.clone(), chats.clone(), *hw);
        tasks.spawn(async move {
            let c = &chats.conversations[index];
            sleep_until(t0 + Duration::from_secs_f64(c.arrival_s)).await;
            let mut history = chats.systems[c.system].clone();
            let mut samples = Vec::new();
            for turn in &c.turns {
                tokio::time::sleep(Duration::from_secs_f64(turn.think_s)).await;
                history.extend_from_slice(&turn.user);
                match fleet.generate(history.clone(), turn.answer_tokens).await {
                    Ok(done) => {
                        samples.push(Ok(sample(&hw, &done)));
                        history.extend_from_slice(&done.tokens);
                    }
                    Err(e) => {
                        samples.push(Err(e));
                        break;
                    }
                }
            }
            samples
        });
    }
    let samples = collect(tasks).await;
    summarise(policy, samples, t0.elapsed())
}

/// The no-reuse control on a fresh fleet routed by `policy`: each request
/// is sent at its arrival time.
pub async fn singles(
    hw: &Hardware,
    policy: Policy,
    seed: u64,
    requests: &Arc<Vec<Single>>,
) -> SimPolicy {
    let fleet = Arc::new(Fleet::start(hw, policy, seed));
    tokio::time::sleep(SETTLE).await;
    let t0 = Instant::now();
    let mut tasks = JoinSet::new();
    for index in 0..requests.len() {
        let (fleet, requests, hw) = (fleet.clone(), requests.clone(), *hw);
        tasks.spawn(async move {
            let r = &requests[index];
            sleep_until(t0 + Duration::from_secs_f64(r.arrival_s)).await;
            let done = fleet.generate(r.prompt.clone(), r.answer_tokens).await;
            vec![done.map(|d| sample(&hw, &d))]
        });
    }
    let samples = collect(tasks).await;
    summarise(policy, samples, t0.elapsed())
}

/// Runs one greedy generation on `engine` to its end.
async fn run_direct(engine: &dyn Engine, prompt: Vec<u32>, max_tokens: u32) -> Result<()> {
    let request = greedy(MODEL, prompt, max_tokens, None);
    let mut generation = engine.submit(request)?;
    while let Some(event) = generation.events.recv().await {
        match event {
            GenerateEvent::Tokens(_) | GenerateEvent::Logprobs(_) => {}
            GenerateEvent::Finished(_) => return Ok(()),
            GenerateEvent::Failed { message, .. } => bail!("the generation failed: {message}"),
        }
    }
    bail!("the engine stopped")
}

/// What the calibration measured.
#[derive(Debug, Clone, Copy)]
pub struct Capacity {
    /// Requests per second the whole fleet completes.
    pub requests_per_s: f64,
    /// A fast node's completions over a slow node's (the speed-up the
    /// simulation really delivers, which the clock's 1 ms resolution could
    /// blunt if the engines did not keep their steps' modelled ends).
    pub fast_to_slow: f64,
}

/// The fleet's slow-path capacity: every node kept saturated (twice its
/// slots in requests at all times) with prompts of `lengths` made of fresh
/// random tokens, so nothing is ever cached; completions are counted over
/// `measure` after a `warm_up`.
pub async fn capacity(
    hw: &Hardware,
    lengths: &[(usize, u32)],
    seed: u64,
    warm_up: Duration,
    measure: Duration,
) -> Capacity {
    if lengths.is_empty() {
        return Capacity {
            requests_per_s: 0.0,
            fast_to_slow: 0.0,
        };
    }
    let fleet = Arc::new(Fleet::start(
        hw,
        Policy::Head(RoutePolicy::LeastLoaded),
        seed,
    ));
    let lengths = Arc::new(lengths.to_vec());
    let done: Arc<Vec<AtomicUsize>> =
        Arc::new((0..hw.nodes).map(|_| AtomicUsize::new(0)).collect());
    let start = Instant::now();
    let (from, until) = (start + warm_up, start + warm_up + measure);
    let mut streams = JoinSet::new();
    for node in 0..hw.nodes {
        for w in 0..(2 * hw.slots as usize) {
            let (fleet, lengths, done) = (fleet.clone(), lengths.clone(), done.clone());
            let mut rng = Rng::derive(seed, 1000 + (node * 64 + w) as u64);
            streams.spawn(async move {
                let mut i = (node * 97 + w * 13) % lengths.len();
                while Instant::now() < until {
                    let (len, answer) = lengths[i % lengths.len()];
                    i += 1;
                    let engine = fleet.engines()[node].as_ref();
                    if run_direct(engine, rng.tokens(len), answer).await.is_err() {
                        return;
                    }
                    let now = Instant::now();
                    if now >= from && now < until {
                        done[node].fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    }
    sleep_until(until).await;
    streams.abort_all();
    while streams.join_next().await.is_some() {}
    let (mut fast, mut slow) = ((0usize, 0usize), (0usize, 0usize));
    for (node, count) in done.iter().enumerate() {
        let count = count.load(Ordering::Relaxed);
        let group = if hw.is_fast(node) {
            &mut fast
        } else {
            &mut slow
        };
        group.0 += count;
        group.1 += 1;
    }
    let mean = |(n, nodes): (usize, usize)| n as f64 / nodes.max(1) as f64;
    Capacity {
        requests_per_s: (fast.0 + slow.0) as f64 / measure.as_secs_f64(),
        fast_to_slow: mean(fast) / mean(slow).max(1e-9),
    }
}
