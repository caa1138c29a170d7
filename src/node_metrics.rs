//! `superfluid node --metrics ADDR`: the node's own view of its engines for
//! Prometheus, beside what the head exports of them. It answers `GET
//! /metrics` with each loaded model's load and measured speeds as its
//! engine's ledger holds them now, the same figures the node reports to the
//! head, read at scrape time and kept nowhere else; a model the head
//! unloads leaves the page, one it loads joins it.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{Context, Result};
use axum::extract::State;
use axum::routing::get;
use axum::Router;
use prometheus::{GaugeVec, Opts, Registry, TextEncoder};

use crate::host_exits::HostExits;
use superfluid_node::engine::Engine;
use superfluid_node::models::ModelSet;

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

/// Serves `GET /metrics` for the engines of `models` on `addr` until the
/// process ends.
pub async fn serve(addr: SocketAddr, models: Arc<ModelSet>) -> Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(addr).await.with_context(|| {
        format!("could not listen for metrics on {addr}; is another server using that port? pass --metrics with another address")
    })?;
    let bound = listener
        .local_addr()
        .context("reading the metrics address")?;
    let app = Router::new()
        .route("/metrics", get(metrics))
        .with_state(models);
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::warn!(error = %e, "the node's metrics server stopped");
        }
    });
    tracing::info!("node metrics at http://{bound}/metrics");
    Ok(bound)
}

async fn metrics(State(models): State<Arc<ModelSet>>) -> impl axum::response::IntoResponse {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        page(&models.engines()),
    )
}

/// The figures of `engine` now, in the order of [`FIGURES`].
fn figures(engine: &dyn Engine) -> [f64; FIGURES.len()] {
    let info = &engine.info().model;
    let ledger = engine.ledger();
    let load = ledger.load_report();
    let cached_blocks: usize = ledger.chains().iter().map(Vec::len).sum();
    [
        f64::from(info.slots),
        f64::from(info.ctx),
        f64::from(load.running),
        f64::from(load.queued),
        load.queued_prompt_tokens as f64,
        f64::from(load.prefill_tokens_per_sec),
        f64::from(load.decode_tokens_per_sec),
        cached_blocks as f64,
    ]
}

/// The page: one gauge per figure, a series per engine's model.
fn page(engines: &[Arc<dyn Engine>]) -> String {
    let registry = Registry::new();
    let values: Vec<_> = engines.iter().map(|e| figures(e.as_ref())).collect();
    for (i, (name, help)) in FIGURES.into_iter().enumerate() {
        let registered = GaugeVec::new(Opts::new(name, help), &["model"]).and_then(|gauge| {
            for (engine, values) in engines.iter().zip(&values) {
                gauge
                    .with_label_values(&[engine.info().model.id.as_str()])
                    .set(values[i]);
            }
            registry.register(Box::new(gauge))
        });
        if let Err(e) = registered {
            tracing::warn!(error = %e, name, "could not add a figure to the node's metrics");
        }
    }
    if let Err(e) = registry.register(Box::new(HostExits::default())) {
        tracing::warn!(error = %e, "could not add the engine host exits to the node's metrics");
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

    fn engine(id: &str, slots: u32) -> Arc<dyn Engine> {
        let model = ModelDescription {
            id: id.into(),
            ctx: 512,
            slots,
            sha256: String::new(),
            ..Default::default()
        };
        Arc::new(FakeEngine::new(model, FakeCosts::default()))
    }

    #[tokio::test]
    async fn the_page_shows_each_engines_limits_and_load_by_model() {
        let (smol, other) = (engine("smol", 4), engine("other", 2));
        smol.ledger().set_load(1, 2, 300);
        other.ledger().set_load(2, 0, 0);
        let page = page(&[smol, other]);
        for (name, model, value) in [
            ("superfluid_engine_slots", "smol", "4"),
            ("superfluid_engine_running", "smol", "1"),
            ("superfluid_engine_queued", "smol", "2"),
            ("superfluid_engine_queued_prompt_tokens", "smol", "300"),
            ("superfluid_engine_slots", "other", "2"),
            ("superfluid_engine_running", "other", "2"),
            ("superfluid_engine_queued", "other", "0"),
        ] {
            let line = format!("{name}{{model=\"{model}\"}} {value}\n");
            assert!(page.contains(&line), "{line}:\n{page}");
        }
        assert!(
            page.contains("# TYPE superfluid_engine_cached_blocks gauge"),
            "{page}"
        );
    }

    #[tokio::test]
    async fn the_page_counts_engine_host_exits_by_model_and_reason() {
        use superfluid_node::host::exits::{record, ExitReason};
        record("exits-page", ExitReason::Signal);
        record("exits-page", ExitReason::Signal);
        record("exits-page", ExitReason::BadFrame);
        let page = page(&[engine("exits-page", 1)]);
        for line in [
            "superfluid_engine_host_exits_total{model=\"exits-page\",reason=\"signal\"} 2\n",
            "superfluid_engine_host_exits_total{model=\"exits-page\",reason=\"bad_frame\"} 1\n",
        ] {
            assert!(page.contains(line), "{line}:\n{page}");
        }
    }
}
