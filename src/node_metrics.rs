//! `superfluid node --metrics ADDR`: the node's own view of its engine for
//! Prometheus, beside what the head exports of it. It answers `GET
//! /metrics` with the engine's load and measured speeds as its ledger holds
//! them now, the same figures the node reports to the head, read at scrape
//! time and kept nowhere else.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{Context, Result};
use axum::extract::State;
use axum::routing::get;
use axum::Router;
use prometheus::{GaugeVec, Opts, Registry, TextEncoder};
use superfluid_node::engine::Engine;

/// The engine figures the page shows, each a gauge by model.
const FIGURES: [(&str, &str); 8] = [
    (
        "superfluid_engine_slots",
        "Sequences the engine runs at once.",
    ),
    (
        "superfluid_engine_context_tokens",
        "Tokens one slot's sequence may hold.",
    ),
    (
        "superfluid_engine_running",
        "Sequences in a slot now (prefilling or decoding).",
    ),
    (
        "superfluid_engine_queued",
        "Requests waiting for a free slot.",
    ),
    (
        "superfluid_engine_queued_prompt_tokens",
        "Prompt tokens still to compute, over queued and prefilling requests.",
    ),
    (
        "superfluid_engine_prefill_tokens_per_second",
        "Measured prompt tokens computed per second (0 until measured).",
    ),
    (
        "superfluid_engine_decode_tokens_per_second",
        "Measured tokens generated per second by one stream (0 until measured).",
    ),
    (
        "superfluid_engine_cached_blocks",
        "Prompt blocks the engine's slots hold in KV cache.",
    ),
];

/// Serves `GET /metrics` for `engine` on `addr` until the process ends.
pub async fn serve(addr: SocketAddr, engine: Arc<dyn Engine>) -> Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(addr).await.with_context(|| {
        format!("could not listen for metrics on {addr}; is another server using that port? pass --metrics with another address")
    })?;
    let bound = listener
        .local_addr()
        .context("reading the metrics address")?;
    let app = Router::new()
        .route("/metrics", get(metrics))
        .with_state(engine);
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::warn!(error = %e, "the node's metrics server stopped");
        }
    });
    tracing::info!("node metrics at http://{bound}/metrics");
    Ok(bound)
}

async fn metrics(State(engine): State<Arc<dyn Engine>>) -> impl axum::response::IntoResponse {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        page(engine.as_ref()),
    )
}

/// The page: one gauge per figure of `engine` now.
fn page(engine: &dyn Engine) -> String {
    let info = &engine.info().model;
    let ledger = engine.ledger();
    let load = ledger.load_report();
    let cached_blocks: usize = ledger.chains().iter().map(Vec::len).sum();
    let values = [
        f64::from(info.slots),
        f64::from(info.ctx),
        f64::from(load.running),
        f64::from(load.queued),
        load.queued_prompt_tokens as f64,
        f64::from(load.prefill_tokens_per_sec),
        f64::from(load.decode_tokens_per_sec),
        cached_blocks as f64,
    ];
    let registry = Registry::new();
    for ((name, help), value) in FIGURES.into_iter().zip(values) {
        let registered = GaugeVec::new(Opts::new(name, help), &["model"]).and_then(|gauge| {
            gauge.with_label_values(&[info.id.as_str()]).set(value);
            registry.register(Box::new(gauge))
        });
        if let Err(e) = registered {
            tracing::warn!(error = %e, name, "could not add a figure to the node's metrics");
        }
    }
    let mut out = String::new();
    if let Err(e) = TextEncoder::new().encode_utf8(&registry.gather(), &mut out) {
        tracing::warn!(error = %e, "could not write the node's metrics page");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use superfluid_node::fake::{FakeCosts, FakeEngine};
    use superfluid_proto::ModelDescription;

    #[tokio::test]
    async fn the_page_shows_the_engines_limits_and_load_by_model() {
        let model = ModelDescription {
            id: "smol".into(),
            ctx: 512,
            slots: 4,
            sha256: String::new(),
        };
        let engine = FakeEngine::new(model, FakeCosts::default());
        engine.ledger().set_load(1, 2, 300);
        let page = page(&engine);
        let model = &engine.info().model;
        let label = format!("{{model=\"{}\"}}", model.id);
        for (name, value) in [
            ("superfluid_engine_slots", model.slots.to_string()),
            ("superfluid_engine_running", "1".into()),
            ("superfluid_engine_queued", "2".into()),
            ("superfluid_engine_queued_prompt_tokens", "300".into()),
        ] {
            assert!(
                page.contains(&format!("{name}{label} {value}\n")),
                "{name} {value}:\n{page}"
            );
        }
        assert!(
            page.contains("# TYPE superfluid_engine_cached_blocks gauge"),
            "{page}"
        );
    }
}
