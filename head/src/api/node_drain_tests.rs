//! Draining nodes as the HTTP client sees them: a model whose every node
//! drains is a 503 that says so, on generations and on `/health`, until a
//! node takes work again.

use super::node_tests::{app, fleet, post, stub, wait_for, Stub};
use super::tests::MODEL;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::Router;
use http_body_util::BodyExt;
use serde_json::{json, Value};
use std::sync::atomic::Ordering;
use tower::ServiceExt;

async fn health(app: Router) -> (StatusCode, Value) {
    let request = Request::get("/health").body(Body::empty()).unwrap();
    let response = app.oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&bytes).unwrap())
}

#[tokio::test]
async fn a_model_whose_every_node_drains_gets_503_saying_so_until_one_takes_work() {
    let (fleet, identity, addr) = fleet().await;
    let sent = stub(addr, &identity, "only", 512, Stub::Answer).await;
    wait_for(&fleet, 1, 512).await;
    fleet.drain("only").unwrap();
    let body = json!({"model": MODEL, "prompt": "Say hi"});
    let (status, node, text) = post(app(fleet.clone()), "/v1/completions", body.clone()).await;
    assert_eq!(
        (status, node),
        (StatusCode::SERVICE_UNAVAILABLE, None),
        "{text}"
    );
    let error: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(error["error"]["code"], "nodes_draining", "{text}");
    assert_eq!(error["error"]["param"], "model", "{text}");
    assert!(
        text.contains("every node that serves model") && text.contains("is draining"),
        "{text}"
    );
    assert_eq!(sent.load(Ordering::SeqCst), 0);
    let (status, report) = health(app(fleet.clone())).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{report}");
    assert_eq!(report["status"], "draining", "{report}");
    assert_eq!(report["models_draining"], json!([MODEL]), "{report}");
    assert_eq!(report["models_without_nodes"], json!([]), "{report}");

    fleet.undrain("only").unwrap();
    assert_eq!(health(app(fleet.clone())).await.0, StatusCode::OK);
    let (status, node, text) = post(app(fleet.clone()), "/v1/completions", body).await;
    assert_eq!(
        (status, node.as_deref()),
        (StatusCode::OK, Some("only")),
        "{text}"
    );
    assert_eq!(sent.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_generation_the_only_node_turns_away_as_it_stops_gets_503_draining() {
    let (fleet, identity, addr) = fleet().await;
    let stopping = stub(addr, &identity, "stopping", 512, Stub::Stopping).await;
    wait_for(&fleet, 1, 512).await;
    let body = json!({"model": MODEL, "prompt": "Say hi", "stream": true});
    let (status, _, text) = post(app(fleet.clone()), "/v1/completions", body).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{text}");
    assert!(text.contains("\"nodes_draining\""), "{text}");
    assert_eq!(stopping.load(Ordering::SeqCst), 1);
}
