//! One scrape's page for a large fleet: 256 connected nodes of 8 slots,
//! each with its load measured and tokens generated for two models, and
//! the head's counters and histograms after traffic on both. The aim is
//! under 10 ms, so a 15 s scrape interval costs the head nothing a user
//! sees.

use criterion::{criterion_group, criterion_main, Criterion};
use std::hint::black_box;
use std::time::{Duration, SystemTime};
use superfluid_head::api::metrics_page::{page, Scraped};
use superfluid_head::fleet::{NodeLoadSnapshot, NodeSnapshot, NodeState};
use superfluid_head::metrics::Metrics;
use superfluid_head::routing::{Reason, RoutePolicy};
use superfluid_link::Identity;
use superfluid_proto::ModelDescription;

const NODES: usize = 256;
const MODELS: [&str; 2] = ["SmolLM2-135M-Instruct.Q4_1", "Qwen2.5-7B-Instruct.Q4_K_M"];

fn nodes() -> Vec<NodeSnapshot> {
    let fingerprint = match Identity::generate() {
        Ok(identity) => identity.fingerprint(),
        Err(e) => panic!("making a key: {e}"),
    };
    (0..NODES)
        .map(|i| NodeSnapshot {
            node_id: format!("node-{i}"),
            name: format!("gpu-box-{i:03}"),
            fingerprint,
            address: ([10, 0, (i / 250) as u8, (i % 250) as u8], 7701).into(),
            models: vec![ModelDescription {
                id: MODELS[i % 2].to_owned(),
                ctx: 4096,
                slots: 8,
                sha256: "0".repeat(64),
                ..Default::default()
            }],
            hardware: "AMD EPYC 7763 64-Core Processor, 128 cores, 512 GiB RAM, CUDA".to_owned(),
            connected_since: SystemTime::UNIX_EPOCH,
            in_flight: (i % 9) as u32,
            served: 1000 + i as u64,
            state: if i % 50 == 0 {
                NodeState::Draining
            } else {
                NodeState::Up
            },
            last_heartbeat: SystemTime::UNIX_EPOCH,
            slots: 8,
            ctx: 4096,
            labels: Vec::new(),
            ineligible: None,
            load: NodeLoadSnapshot {
                busy_slots: (i % 9) as u32,
                idle_slots: 8 - (i % 9) as u32,
                queued: (i % 3) as u32,
                queued_prompt_tokens: 512 * (i % 3) as u64,
                prefill_tokens_per_sec: Some(2000.0 + i as f64),
                decode_tokens_per_sec: Some(40.0 + i as f64 / 10.0),
                mean_generation_secs: Some(4.0),
                cached_blocks: 300 + i,
            },
            link_rtt: Duration::from_micros(300 + i as u64),
        })
        .collect()
}

fn metrics_after_traffic() -> Metrics {
    let metrics = Metrics::default();
    for (i, model) in MODELS.iter().enumerate() {
        for code in [200, 400, 401, 404, 503] {
            metrics.record_request("/v1/chat/completions", model, code);
            metrics.record_request("/v1/completions", model, code);
        }
        metrics.record_finished(model, 1000, 600);
        let latency = metrics.latency(model);
        for k in 0..100 {
            latency.ttft.observe(0.01 * k as f64);
            latency.inter_token.observe(0.001 * k as f64);
            latency.duration.observe(0.1 * k as f64);
            latency.queue.observe(0.0001 * k as f64);
        }
        for node in (i..NODES).step_by(2) {
            metrics
                .generated_tokens(&format!("gpu-box-{node:03}"), model)
                .inc_by(5000);
            metrics.record_join(&format!("gpu-box-{node:03}"));
        }
    }
    metrics.record_route(RoutePolicy::LeastTtft, Reason::Warm, 600);
    metrics
}

fn scrape(c: &mut Criterion) {
    let nodes = nodes();
    let metrics = metrics_after_traffic();
    let refusals = [("expired", 3), ("revoked", 1)];
    let scraped = Scraped {
        nodes: &nodes,
        join_refusals: Some(&refusals),
        key_usage: &[],
    };
    let bytes = page(&metrics, scraped).len();
    c.bench_function(
        &format!("metrics page, {NODES} nodes ({bytes} bytes)"),
        |b| b.iter(|| page(black_box(&metrics), black_box(scraped))),
    );
}

criterion_group!(benches, scrape);
criterion_main!(benches);
