//! Each client request's log: the span its lines go to (request id,
//! endpoint, model, key name, node, prompt and cached tokens, time to first
//! token, outcome) and one line when it ends. A generation ends with
//! `generation done` (see [`Generation`](super::generate::Generation)); a
//! request refused before it got one ends here, with `request refused`.
//! A request refused before any handler ran (a body that is not JSON, a
//! missing key, a refused `Host`, an unknown path) gets its line from
//! [`log_requests`], the layer around every route.
//! With `--log-format json` each line carries the span's fields, so a
//! collector gets one record per request with everything on it.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::extract::{MatchedPath, Request};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::Router;
use tracing::{field, Instrument, Span};

use super::request_metrics::UNMATCHED;
use super::ApiError;

/// The header a client names its session with; the span's `session`.
pub const SESSION_HEADER: &str = "x-superfluid-session";

/// The most bytes of a session name the span keeps.
const MAX_SESSION_LEN: usize = 128;

/// What the layer learns of a request while the routes below it run.
#[derive(Debug, Default)]
struct Seen {
    /// A handler made the request's span and logs its last line.
    handled: AtomicBool,
    /// The name of the key it presented, once the key check knows it.
    key: OnceLock<String>,
    session: String,
}

tokio::task_local! {
    static CURRENT: Arc<Seen>;
}

/// Notes the name of the key the request presented, for the layer's line.
pub fn note_key(name: &str) {
    let _ = CURRENT.try_with(|seen| seen.key.set(name.to_owned()));
}

/// `app` with a line logged for every request no handler logged: refused
/// before a handler ran, or answered by one that logs nothing itself.
pub fn log_requests(app: Router) -> Router {
    app.layer(middleware::from_fn(log))
}

async fn log(request: Request, next: Next) -> Response {
    let endpoint = request
        .extensions()
        .get::<MatchedPath>()
        .map_or(UNMATCHED, MatchedPath::as_str)
        .to_owned();
    let seen = Arc::new(Seen {
        session: session(&request),
        ..Seen::default()
    });
    let response = CURRENT.scope(seen.clone(), next.run(request)).await;
    if seen.handled.load(Ordering::Relaxed) {
        return response;
    }
    let status = response.status().as_u16();
    let span = fields(&endpoint, &next_request_id(), &seen.session);
    if let Some(key) = seen.key.get() {
        span.record("key", key.as_str());
    }
    // A replayed Idempotency-Key answer names the node that answered it.
    if let Some(node) = response
        .headers()
        .get(super::NODE_HEADER)
        .and_then(|v| v.to_str().ok())
    {
        span.record("node", node);
    }
    span.record("outcome", status);
    span.in_scope(|| {
        if status >= 400 {
            tracing::info!(status, "request refused");
        } else if endpoint == "/health" || endpoint == "/metrics" {
            tracing::debug!(status, "request done");
        } else {
            tracing::info!(status, "request done");
        }
    });
    response
}

/// The `x-superfluid-session` header's printable text, cut to
/// [`MAX_SESSION_LEN`] bytes; empty without one.
fn session(request: &Request) -> String {
    let Some(value) = request.headers().get(SESSION_HEADER) else {
        return String::new();
    };
    value
        .as_bytes()
        .iter()
        .filter(|b| b.is_ascii_graphic())
        .take(MAX_SESSION_LEN)
        .map(|b| char::from(*b))
        .collect()
}

/// The span every request's logs go to, with its request id; the session
/// comes from the request's header when the [`log_requests`] layer saw it.
pub fn span(endpoint: &'static str, id: &str) -> Span {
    let session = CURRENT
        .try_with(|seen| {
            seen.handled.store(true, Ordering::Relaxed);
            seen.session.clone()
        })
        .unwrap_or_default();
    fields(endpoint, id, &session)
}

fn fields(endpoint: &str, id: &str, session: &str) -> Span {
    tracing::info_span!(
        "request",
        id = %id,
        endpoint,
        session,
        model = field::Empty,
        key = field::Empty,
        node = field::Empty,
        prompt_tokens = field::Empty,
        cached_tokens = field::Empty,
        ttft_ms = field::Empty,
        outcome = field::Empty,
    )
}

/// An error a handler answers with, whichever API's shape its body has.
pub trait Refused: std::fmt::Display {
    /// The status it is answered with.
    fn status(&self) -> StatusCode;
}

impl Refused for ApiError {
    fn status(&self) -> StatusCode {
        ApiError::status(self)
    }
}

/// Runs a request's `work` in `span`; a refusal is logged with its status
/// and message. Every generating handler of every API runs its work here,
/// so each request ends with exactly one line.
pub async fn logged<T, E: Refused>(
    span: Span,
    work: impl Future<Output = Result<T, E>>,
) -> Result<T, E> {
    let answer = work.instrument(span.clone()).await;
    if let Err(error) = &answer {
        let status = error.status().as_u16();
        span.record("outcome", status);
        span.in_scope(|| tracing::info!(status, error = %error, "request refused"));
    }
    answer
}

/// A request id unique within this process and unlikely to repeat across
/// restarts.
pub fn next_request_id() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let start = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    format!("{:x}{:04x}", start >> 16, n & 0xffff)
}
