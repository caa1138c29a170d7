//! How a session store error is answered: status, type, `param`, `code`.

use axum::http::StatusCode;

use crate::sessions::SessionError;

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
