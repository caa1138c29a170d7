//! [`ApiError`]: every way a request can fail, and the one place it becomes
//! an HTTP response: one status for every dialect, and the body in the
//! shape of the dialect the request speaks ([`Dialect`]).

use super::dialect::Dialect;
use crate::codec::CodecError;
use crate::fleet::FleetError;
use crate::keys::limiter::LimitKind;
use crate::keys::KeysError;
use crate::sessions::SessionError;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use superfluid_proto::FailureKind;

mod body;
mod session_parts;
pub use body::anthropic_type;
use session_parts::session_parts;

/// The client sees the node's own words for its mistakes; a node's failure
/// is said to be the node's.
fn node_failure_text(kind: FailureKind, message: &str) -> String {
    if kind.is_request_error() {
        message.to_owned()
    } else {
        format!("the node could not run the generation: {message}")
    }
}

/// A request that could not be served.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The body is not the JSON the endpoint expects (wrong content type,
    /// syntax error, a field of the wrong type).
    #[error("{message}")]
    BadJson {
        /// What is wrong and how to fix it.
        message: String,
        /// The field at fault, if one is.
        param: Option<String>,
    },
    /// The body is larger than the head accepts.
    #[error("the request body is too large; send a shorter prompt")]
    TooLarge,
    /// A parameter is missing or has a value the head does not accept.
    #[error("{message}")]
    InvalidParam {
        /// The parameter, as the client named it.
        param: String,
        /// What is wrong and what values are accepted.
        message: String,
    },
    /// The requested model is not served by this head.
    #[error("model {model:?} does not exist here; served models: {}", served.join(", "))]
    UnknownModel {
        /// The model asked for.
        model: String,
        /// The ids the head serves.
        served: Vec<String>,
    },
    /// The prompt leaves no room in the context for even one new token.
    #[error("this model's maximum context length is {max} tokens, but your request has {len} tokens; shorten the prompt or drop earlier turns")]
    ContextLength {
        /// The context length of the nodes serving the model.
        max: u32,
        /// The prompt's length in tokens.
        len: usize,
        /// `messages` or `prompt`.
        param: &'static str,
    },
    /// The chat template could not turn the messages into a prompt.
    #[error(transparent)]
    Codec(#[from] CodecError),
    /// No node can take the generation right now.
    #[error(transparent)]
    Fleet(#[from] FleetError),
    /// The node could not run the generation.
    #[error("the node could not run the generation: {message}")]
    Generation {
        /// What the node said.
        message: String,
    },
    /// The node refused or failed the generation, and said which kind of
    /// failure it was: the request's mistakes are answered as the client's
    /// (400, 404), the node's own failures as a bad gateway.
    #[error("{}", node_failure_text(*.kind, .message))]
    NodeFailed {
        /// What kind of failure the node reported.
        kind: FailureKind,
        /// What the node said.
        message: String,
        /// The request field the prompt came from: `messages` or `prompt`.
        param: &'static str,
    },
    /// No route matches the request's path.
    #[error("no route for {method} {path}; the head serves /v1/chat/completions, /v1/completions, /v1/embeddings, /v1/models, /v1/messages, /v1/sessions, /v1/responses, /v1/fleet, /api/* (Ollama), /metrics and /health")]
    NotFound {
        /// The request method.
        method: String,
        /// The request path.
        path: String,
    },
    /// An admin route was called without the head's admin key.
    #[error("this admin route needs the head's admin key as `Authorization: Bearer KEY`; the key is in admin.key in the head's data dir")]
    Unauthorized,
    /// `/metrics` was scraped without the head's metrics key, or with
    /// another key, while one is set.
    #[error("/metrics needs the head's metrics key as `Authorization: Bearer KEY`: the one given to the head with --metrics-key (SUPERFLUID_METRICS_KEY); set it in the scraper's `authorization` credentials")]
    MetricsKey,
    /// A client route was called without a key while keys are required.
    #[error("this API needs a key: send it as `Authorization: Bearer KEY` or `x-api-key: KEY`; the operator makes keys with `superfluid keys create NAME`")]
    MissingApiKey,
    /// The key presented is not one the head knows (mistyped, revoked, or
    /// never made).
    #[error("the API key is not valid: it may be mistyped or revoked; check it, or ask the operator for a new one (`superfluid keys create NAME`)")]
    InvalidApiKey,
    /// The key presented has passed its expiry.
    #[error("the API key {name:?} has expired; ask the operator for a new one (`superfluid keys create NAME`)")]
    ExpiredApiKey {
        /// The key's name.
        name: String,
    },
    /// The key presented may not use the requested model.
    #[error("the API key {key:?} may not use model {model:?}; use a model GET /v1/models lists, or ask the operator for a key that may use it")]
    ModelNotAllowed {
        /// The model asked for.
        model: String,
        /// The key's name.
        key: String,
    },
    /// A head bound to loopback was addressed by a name it does not answer
    /// to, as a web page using DNS rebinding would address it.
    #[error("this server listens on loopback and answers only requests addressed to localhost, 127.0.0.1 or [::1]; this one came with {host}, as a web page using DNS rebinding would send. Use http://localhost:PORT or http://127.0.0.1:PORT, or start the server with --allowed-host NAME to answer to that name too")]
    HostNotAllowed {
        /// The host the request named, or what was wrong with it.
        host: String,
    },
    /// The key presented has used up one of its per-minute limits.
    #[error("rate limit reached for API key {key:?} on {} per minute: the limit is {limit}; retry in {retry_after} s, or ask the operator for a higher limit", kind.as_str())]
    RateLimited {
        /// The key's name.
        key: String,
        /// The limit it ran into.
        kind: LimitKind,
        /// That limit's value per minute.
        limit: u32,
        /// Seconds until a request would pass.
        retry_after: u64,
    },
    /// An admin key operation failed.
    #[error(transparent)]
    Keys(#[from] KeysError),
    /// A session operation failed; the store's message says what to do.
    #[error(transparent)]
    Session(#[from] SessionError),
    /// The head was started without a session store.
    #[error("this head keeps no sessions; start it with a data dir (`superfluid serve --data-dir DIR` or `superfluid head --data-dir DIR`)")]
    NoSessions,
    /// A change that needs the version the client read came without it.
    #[error("{what} needs the header `If-Match: VERSION`, with the session's `version` from GET /v1/sessions/{session}; read the session, then retry with its version")]
    IfMatchRequired {
        /// The change asked for.
        what: &'static str,
        /// The session.
        session: i64,
    },
    /// No stored response has this id.
    #[error("no response {id}: it was never stored (`store: false`), was deleted, or the id is mistyped; only responses created with `store: true` (the default) are kept")]
    ResponseNotFound {
        /// The id asked for.
        id: String,
    },
    /// Later responses continue this one, so it cannot be deleted alone.
    #[error("response {id} was continued by later responses of its conversation; delete those first, newest first")]
    ResponseContinued {
        /// The response.
        id: String,
    },
    /// An `Idempotency-Key` came again with a different request.
    #[error("the Idempotency-Key {key:?} was already used with a different request; use a new key for a new request, or send exactly the same request to get its first result again")]
    IdempotencyMismatch {
        /// The key.
        key: String,
    },
    /// The first request with this `Idempotency-Key` is still running.
    #[error("the request with Idempotency-Key {key:?} is still running; retry when it has finished to get its result")]
    IdempotencyInFlight {
        /// The key.
        key: String,
    },
    /// The route exists but not for this method.
    #[error(
        "{method} is not allowed on {path}; see the OpenAI API for the method this route takes"
    )]
    MethodNotAllowed {
        /// The request method.
        method: String,
        /// The request path.
        path: String,
    },
    /// A route superfluid answers differently from the API it comes from
    /// (Ollama's model management, say), with the status to answer and
    /// what to do instead.
    #[error("{message}")]
    Refused {
        /// 400, 404 or 501.
        status: StatusCode,
        /// What is not done and what to do instead.
        message: String,
    },
}

impl ApiError {
    /// A missing or unacceptable parameter.
    pub fn param(param: impl Into<String>, message: impl Into<String>) -> Self {
        ApiError::InvalidParam {
            param: param.into(),
            message: message.into(),
        }
    }

    /// A refusal with its own status and what to do instead.
    pub fn refused(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError::Refused {
            status,
            message: message.into(),
        }
    }

    /// The HTTP status, error type, `param` and `code` of this error.
    fn parts(
        &self,
    ) -> (
        StatusCode,
        &'static str,
        Option<String>,
        Option<&'static str>,
    ) {
        use ApiError::*;
        let invalid = "invalid_request_error";
        match self {
            BadJson { param, .. } => (StatusCode::BAD_REQUEST, invalid, param.clone(), None),
            TooLarge => (StatusCode::PAYLOAD_TOO_LARGE, invalid, None, None),
            InvalidParam { param, .. } => {
                (StatusCode::BAD_REQUEST, invalid, Some(param.clone()), None)
            }
            UnknownModel { .. } => (
                StatusCode::NOT_FOUND,
                invalid,
                Some("model".into()),
                Some("model_not_found"),
            ),
            ContextLength { param, .. } => (
                StatusCode::BAD_REQUEST,
                invalid,
                Some((*param).into()),
                Some("context_length_exceeded"),
            ),
            Codec(CodecError::Template { .. } | CodecError::NoTemplate { .. }) => (
                StatusCode::BAD_REQUEST,
                invalid,
                Some("messages".into()),
                None,
            ),
            Codec(_) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "server_error",
                None,
                None,
            ),
            Fleet(FleetError::NoNode { .. }) => (
                StatusCode::SERVICE_UNAVAILABLE,
                "service_unavailable",
                Some("model".into()),
                Some("no_node"),
            ),
            Fleet(FleetError::NotLoaded { .. }) => (
                StatusCode::SERVICE_UNAVAILABLE,
                "service_unavailable",
                Some("model".into()),
                Some("model_not_loaded"),
            ),
            Fleet(FleetError::Busy { .. }) => (
                StatusCode::TOO_MANY_REQUESTS,
                "fleet_busy",
                None,
                Some("fleet_busy"),
            ),
            Fleet(FleetError::Draining { .. }) => (
                StatusCode::SERVICE_UNAVAILABLE,
                "service_unavailable",
                Some("model".into()),
                Some("nodes_draining"),
            ),
            Fleet(FleetError::UnknownNode { .. }) => {
                (StatusCode::NOT_FOUND, invalid, Some("node".into()), None)
            }
            Fleet(FleetError::Ambiguous { .. }) => {
                (StatusCode::BAD_REQUEST, invalid, Some("node".into()), None)
            }
            Fleet(FleetError::NoMembership) => (StatusCode::NOT_FOUND, invalid, None, None),
            Unauthorized => (
                StatusCode::UNAUTHORIZED,
                "authentication_error",
                None,
                Some("invalid_admin_key"),
            ),
            MetricsKey => (
                StatusCode::UNAUTHORIZED,
                "authentication_error",
                None,
                Some("invalid_metrics_key"),
            ),
            MissingApiKey | InvalidApiKey | ExpiredApiKey { .. } => (
                StatusCode::UNAUTHORIZED,
                invalid,
                None,
                Some("invalid_api_key"),
            ),
            ModelNotAllowed { .. } => (
                StatusCode::FORBIDDEN,
                invalid,
                Some("model".into()),
                Some("model_not_allowed"),
            ),
            HostNotAllowed { .. } => (
                StatusCode::FORBIDDEN,
                invalid,
                None,
                Some("host_not_allowed"),
            ),
            RateLimited { kind, .. } => (
                StatusCode::TOO_MANY_REQUESTS,
                kind.as_str(),
                None,
                Some("rate_limit_exceeded"),
            ),
            Keys(KeysError::NameTaken { .. }) => {
                (StatusCode::CONFLICT, invalid, Some("name".into()), None)
            }
            Keys(KeysError::UnknownName { .. }) => {
                (StatusCode::NOT_FOUND, invalid, Some("name".into()), None)
            }
            Keys(KeysError::BadName { .. }) => {
                (StatusCode::BAD_REQUEST, invalid, Some("name".into()), None)
            }
            Keys(KeysError::ZeroLimit { what }) => {
                (StatusCode::BAD_REQUEST, invalid, Some((*what).into()), None)
            }
            Keys(KeysError::NoStore) => (StatusCode::NOT_FOUND, invalid, None, None),
            Keys(_) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "server_error",
                None,
                None,
            ),
            NodeFailed { kind, param, .. } => match kind {
                FailureKind::PromptTooLong => (
                    StatusCode::BAD_REQUEST,
                    invalid,
                    Some((*param).into()),
                    Some("context_length_exceeded"),
                ),
                FailureKind::UnknownModel => (
                    StatusCode::NOT_FOUND,
                    invalid,
                    Some("model".into()),
                    Some("model_not_found"),
                ),
                FailureKind::EmptyPrompt | FailureKind::InvalidToken => (
                    StatusCode::BAD_REQUEST,
                    invalid,
                    Some((*param).into()),
                    None,
                ),
                FailureKind::InvalidConstraint => (
                    StatusCode::BAD_REQUEST,
                    invalid,
                    Some("response_format".into()),
                    None,
                ),
                FailureKind::Engine | FailureKind::Stopped => {
                    (StatusCode::BAD_GATEWAY, "server_error", None, None)
                }
            },
            Fleet(_) | Generation { .. } => (StatusCode::BAD_GATEWAY, "server_error", None, None),
            NotFound { .. } => (StatusCode::NOT_FOUND, invalid, None, Some("unknown_url")),
            Session(err) => session_parts(err),
            NoSessions => (StatusCode::NOT_FOUND, invalid, None, Some("no_sessions")),
            IfMatchRequired { .. } => (
                StatusCode::PRECONDITION_REQUIRED,
                invalid,
                Some("If-Match".into()),
                Some("if_match_required"),
            ),
            ResponseNotFound { .. } => (
                StatusCode::NOT_FOUND,
                invalid,
                None,
                Some("response_not_found"),
            ),
            ResponseContinued { .. } => (
                StatusCode::CONFLICT,
                invalid,
                None,
                Some("response_continued"),
            ),
            IdempotencyMismatch { .. } => (
                StatusCode::UNPROCESSABLE_ENTITY,
                invalid,
                Some("Idempotency-Key".into()),
                Some("idempotency_key_reused"),
            ),
            IdempotencyInFlight { .. } => (
                StatusCode::CONFLICT,
                invalid,
                Some("Idempotency-Key".into()),
                Some("idempotency_key_in_use"),
            ),
            MethodNotAllowed { .. } => (StatusCode::METHOD_NOT_ALLOWED, invalid, None, None),
            Refused { status, .. } if status.is_server_error() => {
                (*status, "server_error", None, None)
            }
            Refused { status, .. } => (*status, invalid, None, None),
        }
    }

    /// The HTTP status this error is answered with.
    pub fn status(&self) -> StatusCode {
        self.parts().0
    }
}

/// On a 429 from a busy fleet: generations waiting for a slot on the
/// nodes that serve the model.
pub const QUEUE_HEADER: header::HeaderName = header::HeaderName::from_static("x-superfluid-queue");

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        if status.is_server_error() {
            tracing::warn!(%status, error = %self, "request failed");
        } else {
            tracing::debug!(%status, error = %self, "request rejected");
        }
        let challenge = matches!(
            self,
            ApiError::MissingApiKey
                | ApiError::InvalidApiKey
                | ApiError::ExpiredApiKey { .. }
                | ApiError::MetricsKey
        );
        let busy = match &self {
            ApiError::Fleet(FleetError::Busy {
                queued,
                retry_after_secs,
                ..
            }) => Some((*queued, *retry_after_secs)),
            _ => None,
        };
        let body = self.body_in(Dialect::current());
        let mut response = (status, Json(body)).into_response();
        if let Some((queued, retry_after)) = busy {
            let headers = response.headers_mut();
            headers.insert(header::RETRY_AFTER, HeaderValue::from(retry_after));
            headers.insert(QUEUE_HEADER, HeaderValue::from(queued));
        }
        if challenge {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}
