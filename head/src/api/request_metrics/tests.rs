//! Every response counted once, under the route that matched, the model
//! the handler found and the status it answered with.

use super::*;
use axum::body::Body;
use axum::http::{Request as HttpRequest, StatusCode};
use axum::routing::get;
use axum::Extension;
use tower::ServiceExt;

async fn found(model: Option<Extension<RequestModel>>) -> StatusCode {
    if let Some(Extension(model)) = model {
        model.set("smol");
    }
    StatusCode::BAD_REQUEST
}

async fn refuse(_: Request, _: Next) -> Response {
    let mut response = Response::default();
    *response.status_mut() = StatusCode::UNAUTHORIZED;
    response
}

fn app(metrics: &Arc<Metrics>) -> Router {
    let app = Router::new()
        .route("/v1/chat/completions", get(found))
        .route(
            "/v1/models",
            get(|| async { "" }).route_layer(middleware::from_fn(refuse)),
        )
        .route("/health", get(|| async { "ok" }));
    count_requests(app, metrics.clone())
}

async fn get_path(metrics: &Arc<Metrics>, path: &str) -> StatusCode {
    let request = HttpRequest::get(path)
        .body(Body::empty())
        .unwrap_or_default();
    match app(metrics).oneshot(request).await {
        Ok(response) => response.status(),
        Err(never) => match never {},
    }
}

fn requests(metrics: &Metrics) -> Vec<(String, String, String, f64)> {
    let mut rows: Vec<_> = metrics
        .families()
        .into_iter()
        .filter(|f| f.name() == "superfluid_http_requests_total")
        .flat_map(|f| f.get_metric().to_vec())
        .map(|m| {
            let label = |name: &str| {
                m.get_label()
                    .iter()
                    .find(|l| l.name() == name)
                    .map(|l| l.value().to_owned())
                    .unwrap_or_default()
            };
            (
                label("endpoint"),
                label("model"),
                label("code"),
                m.get_counter().get_value(),
            )
        })
        .collect();
    rows.sort_by(|a, b| a.0.cmp(&b.0));
    rows
}

#[tokio::test]
async fn each_response_is_counted_once_with_its_route_model_and_status() {
    let metrics = Arc::new(Metrics::default());
    assert_eq!(
        get_path(&metrics, "/v1/chat/completions").await,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        get_path(&metrics, "/v1/models").await,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(get_path(&metrics, "/health").await, StatusCode::OK);
    assert_eq!(get_path(&metrics, "/health").await, StatusCode::OK);
    assert_eq!(
        get_path(&metrics, "/nowhere/42").await,
        StatusCode::NOT_FOUND
    );
    let row = |e: &str, m: &str, c: &str, n: f64| (e.to_owned(), m.to_owned(), c.to_owned(), n);
    assert_eq!(
        requests(&metrics),
        [
            row("/health", "", "200", 2.0),
            row("/v1/chat/completions", "smol", "400", 1.0),
            row("/v1/models", "", "401", 1.0),
            row(UNMATCHED, "", "404", 1.0),
        ]
    );
}
