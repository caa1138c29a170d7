//! `bench routing`: every routing policy on the same requests, in a
//! simulated fleet of fake engines of mixed speed (fast, in-process, the
//! head's own routing code) and on a real fleet of two llama.cpp nodes
//! behind a head over loopback Link F and HTTP.
//!
//! The simulated fleet runs on a runtime of its own whose clock is tokio's,
//! paused and advancing by itself whenever every task waits (as quinn's
//! `Pair` and linkerd's `start_paused` tests do): the fake engines, the
//! router and the clients all read that clock, so a run is deterministic
//! for a seed and minutes of simulated time take seconds. The real fleet
//! runs on a normal runtime and real time.
//!
//! - [`workload`]: the simulated chats and the no-reuse control;
//! - [`sim`]: the simulated fleet (engines, router, ledger feeders);
//! - [`oracle`]: least-ttft with exact, instant knowledge of every cache;
//! - [`drive`]: running a workload on a fleet, and the capacity calibration;
//! - [`real`], [`chat`], [`text`]: the real fleet, the HTTP requests a user sends, and their text;
//! - [`report`]: the numbers, the targets, the table.

mod chat;
mod drive;
mod oracle;
mod real;
pub mod report;
mod rng;
mod sim;
#[cfg(test)]
mod tests;
mod text;
mod workload;

use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use llama_cpp_2::llama_backend::LlamaBackend;
use superfluid_head::routing::RoutePolicy;

use crate::stats::Spread;
use crate::RoutingArgs;
use report::{P50Pairs, Report, SimRate, SimReport};
use sim::{Hardware, Policy};
use workload::Shape;

/// The loads measured, as fractions of the slow-path capacity.
const LOADS: [(&str, f64); 3] = [("light", 0.3), ("medium", 0.6), ("near-saturation", 0.9)];

/// Every policy, in the order reported; the oracle last.
const POLICIES: [Policy; 5] = [
    Policy::Head(RoutePolicy::LeastTtft),
    Policy::Head(RoutePolicy::RoundRobin),
    Policy::Head(RoutePolicy::LeastLoaded),
    Policy::Head(RoutePolicy::Random),
    Policy::Oracle,
];

fn hardware() -> Hardware {
    Hardware {
        nodes: 16,
        fast_nodes: 4,
        fast_speedup: 4.0,
        slots: 4,
        ctx: 8192,
        prefill_tokens_per_s: 20_000.0,
        decode_steps_per_s: 1_000.0,
    }
}

/// Measures the simulated fleet on a current-thread runtime whose clock
/// starts paused: time moves only when every task waits, straight to the
/// next timer, so the figures depend on the seed alone and not on the
/// machine. Every time it reports is simulated time.
pub fn run_simulated(args: &RoutingArgs) -> Result<SimReport> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .context("starting the simulated fleet's runtime")?;
    let started = std::time::Instant::now();
    let sim = runtime
        .block_on(simulate(args))
        .context("the simulated fleet")?;
    eprintln!(
        "sim: done in {:.1} s of wall time",
        started.elapsed().as_secs_f64()
    );
    Ok(sim)
}

async fn simulate(args: &RoutingArgs) -> Result<SimReport> {
    let hw = hardware();
    let shape = Shape::default();
    let seed = args.seed;
    let window = args.sim_seconds;
    let sample = workload::chats(&shape, seed, 99, 100.0, 5.0);
    let calibration = drive::capacity(
        &hw,
        &workload::chat_lengths(&sample),
        seed,
        Duration::from_secs(1),
        Duration::from_secs(3),
    )
    .await;
    if calibration.requests_per_s <= 0.0 {
        bail!("the simulated fleet completed no request while calibrating");
    }
    let capacity = calibration.requests_per_s;
    eprintln!(
        "sim: slow-path capacity {capacity:.1} requests/s; a fast node completes {:.2}x a slow one's",
        calibration.fast_to_slow
    );
    let (mut chat, mut no_reuse) = (Vec::new(), Vec::new());
    let wanted = |w: &str| args.workload.as_deref().is_none_or(|only| only == w);
    for (stream, &(load, fraction)) in LOADS.iter().enumerate() {
        if !args.loads.is_empty() && !args.loads.iter().any(|l| l == load) {
            continue;
        }
        let per_s = fraction * capacity;
        let conv_per_s = per_s / shape.mean_turns();
        let chats = Arc::new(workload::chats(
            &shape,
            seed,
            stream as u64,
            conv_per_s,
            window,
        ));
        if wanted("chat") {
            chat.push(SimRate {
                load: load.into(),
                fraction_of_capacity: fraction,
                requests_per_s: per_s,
                conversations_per_s: Some(conv_per_s),
                policies: chat_policies(&hw, seed, load, &chats).await,
                p50_pairs: None,
            });
        }
        if !wanted("no-reuse") {
            continue;
        }
        let lengths = workload::chat_lengths(&chats);
        // Pair 0 runs on this rate's own requests; each further pair on
        // fresh arrivals of the same lengths and rate, since a second run
        // on the same requests would repeat the first exactly.
        let pairs: Vec<Arc<Vec<workload::Single>>> = (0..u64::from(args.no_reuse_pairs))
            .map(|pair| {
                let stream = stream as u64 + pair * LOADS.len() as u64;
                Arc::new(workload::unique(&lengths, seed, stream, per_s, window))
            })
            .collect();
        let (policies, p50_pairs) = no_reuse_policies(&hw, seed, load, &pairs).await;
        no_reuse.push(SimRate {
            load: load.into(),
            fraction_of_capacity: fraction,
            requests_per_s: per_s,
            conversations_per_s: None,
            policies,
            p50_pairs: Some(p50_pairs),
        });
    }
    Ok(SimReport {
        time_scale: format!(
            "simulated time on a paused clock: a 1x node computes {} prompt tokens/s and {} decode steps/s (a 4x node four times that); TTFT in ms of simulated time, read at the clock's 1 ms resolution",
            hw.prefill_tokens_per_s, hw.decode_steps_per_s
        ),
        nodes: hw.nodes,
        fast_nodes: hw.fast_nodes,
        fast_speedup: hw.fast_speedup,
        slots: hw.slots,
        prefill_tokens_per_s: hw.prefill_tokens_per_s,
        decode_steps_per_s: hw.decode_steps_per_s,
        shape,
        window_s: window,
        slow_path_capacity_requests_per_s: capacity,
        measured_fast_to_slow_throughput: calibration.fast_to_slow,
        chat,
        no_reuse,
    })
}

/// Every policy and the oracle on the chat workload `chats`.
async fn chat_policies(
    hw: &Hardware,
    seed: u64,
    load: &str,
    chats: &Arc<workload::Chats>,
) -> Vec<report::SimPolicy> {
    let mut policies = Vec::new();
    for policy in POLICIES {
        let measured = drive::chats(hw, policy, seed, chats).await;
        eprintln!(
            "sim chat {load}: {:<13} p50 {:>8.1} ms p99 {:>8.1} ms avoided {}",
            measured.policy,
            measured.ttft_p50_ms,
            measured.ttft_p99_ms,
            measured.prefill_tokens_avoided
        );
        policies.push(measured);
    }
    policies
}

/// Every policy but the oracle once on the no-reuse requests `pairs[0]`,
/// then least-ttft and least-loaded on each further set of `pairs`.
async fn no_reuse_policies(
    hw: &Hardware,
    seed: u64,
    load: &str,
    pairs: &[Arc<Vec<workload::Single>>],
) -> (Vec<report::SimPolicy>, P50Pairs) {
    let mut policies = Vec::new();
    let (least_ttft, least_loaded) = (
        Policy::Head(RoutePolicy::LeastTtft),
        Policy::Head(RoutePolicy::LeastLoaded),
    );
    let (mut ttft, mut loaded) = (Vec::new(), Vec::new());
    if let Some(first) = pairs.first() {
        for policy in POLICIES.into_iter().filter(|p| *p != Policy::Oracle) {
            let measured = drive::singles(hw, policy, seed, first).await;
            eprintln!(
                "sim no-reuse {load}: {:<13} p50 {:>8.1} ms p99 {:>8.1} ms",
                measured.policy, measured.ttft_p50_ms, measured.ttft_p99_ms
            );
            if policy == least_ttft {
                ttft.push(measured.ttft_p50_ms);
            } else if policy == least_loaded {
                loaded.push(measured.ttft_p50_ms);
            }
            policies.push(measured);
        }
    }
    for (pair, singles) in pairs.iter().enumerate().skip(1) {
        let t = drive::singles(hw, least_ttft, seed, singles)
            .await
            .ttft_p50_ms;
        let l = drive::singles(hw, least_loaded, seed, singles)
            .await
            .ttft_p50_ms;
        eprintln!(
            "sim no-reuse {load}: pair {} least-ttft p50 {t:.1} ms, least-loaded p50 {l:.1} ms",
            pair + 1
        );
        ttft.push(t);
        loaded.push(l);
    }
    let ratio = Spread::of_ratios(&ttft, &loaded);
    let pairs = P50Pairs {
        least_ttft_p50_ms: ttft,
        least_loaded_p50_ms: loaded,
        ratio,
    };
    (policies, pairs)
}

/// Measures the real fleet on a multi-threaded runtime, in real time.
pub fn run_real(args: &RoutingArgs) -> Result<report::RealReport> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the real fleet's runtime")?;
    runtime.block_on(real_fleet(args)).context("the real fleet")
}

async fn real_fleet(args: &RoutingArgs) -> Result<report::RealReport> {
    let Some(model) = args.model.clone() else {
        bail!("the real fleet needs --model (or SUPERFLUID_MODEL); pass --skip-real to measure only the simulated fleet");
    };
    if !model.is_file() {
        bail!("model file {} does not exist; run scripts/setup to install the default model, or pass --model PATH", model.display());
    }
    llama_cpp_2::send_logs_to_tracing(llama_cpp_2::LogOptions::default().with_logs_enabled(false));
    let backend = Arc::new(LlamaBackend::init().context("initialising llama.cpp")?);
    let setup = real::Setup {
        model,
        seed: args.seed,
        nodes: 2,
        slots: 4,
        ctx: 4096,
        threads: 1,
        conversations: args.real_conversations,
        turns: 4,
        max_tokens: 32,
        in_flight: 3,
        system_words: vec![220, 330, 440],
        notes_words: 150,
    };
    real::run(&backend, &setup).await
}

/// The report of the parts measured, held to the targets.
pub fn report(seed: u64, sim: Option<SimReport>, real: Option<report::RealReport>) -> Report {
    let targets = report::targets(sim.as_ref(), real.as_ref());
    Report {
        seed,
        all_targets_hold: targets.iter().all(|t| t.holds),
        sim,
        real,
        targets,
    }
}
