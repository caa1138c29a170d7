//! The Ollama endpoints superfluid answers with what to do instead: model
//! management (models come from the head's and nodes' `--model` files, not
//! from a registry).

use crate::api::ApiError;
use axum::http::{Method, StatusCode, Uri};

/// How models get into the fleet, said by every model-management refusal.
const HOW_MODELS_ARRIVE: &str = "models get into the fleet as GGUF files: start the head (or `superfluid serve`) with `--model PATH.gguf`; nodes fetch the head's model file on their own. GET /api/tags lists the served models";

/// `pull`, `push`, `create`, `copy`, `delete` and blob uploads.
pub async fn manage(uri: Uri) -> ApiError {
    ApiError::refused(
        StatusCode::BAD_REQUEST,
        format!("{} is not supported: {HOW_MODELS_ARRIVE}", uri.path()),
    )
}

/// Any other `/api/...` path.
pub async fn not_found(method: Method, uri: Uri) -> ApiError {
    ApiError::refused(
        StatusCode::NOT_FOUND,
        format!(
            "no route for {method} {}; the Ollama API here serves /api/chat, /api/generate, /api/embed, /api/embeddings, /api/tags, /api/ps, /api/show and /api/version",
            uri.path()
        ),
    )
}
