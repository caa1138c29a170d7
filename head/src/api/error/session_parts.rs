//! How a session store error is answered: status, type, `param`, `code`.

use axum::http::StatusCode;

use crate::sessions::{Limit, SessionError};

/// Status, type, `param` and `code` of a session store error.
pub(super) fn session_parts(
    err: &SessionError,
) -> (
    StatusCode,
    &'static str,
    Option<String>,
    Option<&'static str>,
) {
    let invalid = "invalid_request_error";
    match err {
        SessionError::NotFound { .. } => (
            StatusCode::NOT_FOUND,
            invalid,
            None,
            Some("session_not_found"),
        ),
        SessionError::EventNotInHistory { .. } => (
            StatusCode::BAD_REQUEST,
            invalid,
            Some("at".into()),
            Some("event_not_in_history"),
        ),
        SessionError::StaleVersion { .. } => (
            StatusCode::PRECONDITION_FAILED,
            invalid,
            Some("If-Match".into()),
            Some("stale_version"),
        ),
        SessionError::Busy { .. } => (StatusCode::CONFLICT, invalid, None, Some("session_busy")),
        SessionError::HasForks { .. } => (
            StatusCode::CONFLICT,
            invalid,
            None,
            Some("session_has_forks"),
        ),
        SessionError::ForkedAfter { .. } => (
            StatusCode::CONFLICT,
            invalid,
            Some("at".into()),
            Some("session_forked_after"),
        ),
        // Each status says what the client can do: 413, a shorter message;
        // 422, not this session (fork, trim or a new one); 429, a quota on
        // the key that purging frees; 507, the head's storage is full.
        SessionError::OverLimit { limit, .. } => match limit {
            Limit::MessageBytes => (
                StatusCode::PAYLOAD_TOO_LARGE,
                invalid,
                Some("content".into()),
                Some("session_message_too_large"),
            ),
            Limit::Events => (
                StatusCode::UNPROCESSABLE_ENTITY,
                invalid,
                None,
                Some("session_events_limit"),
            ),
            Limit::SessionsPerKey => (
                StatusCode::TOO_MANY_REQUESTS,
                "insufficient_quota",
                None,
                Some("session_limit_per_key"),
            ),
            Limit::TotalBytes => (
                StatusCode::INSUFFICIENT_STORAGE,
                "server_error",
                None,
                Some("session_storage_full"),
            ),
        },
        SessionError::Corrupt { .. }
        | SessionError::Db { .. }
        | SessionError::Stopped { .. }
        | SessionError::BadRow { .. } => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "server_error",
            None,
            Some("session_store"),
        ),
    }
}
