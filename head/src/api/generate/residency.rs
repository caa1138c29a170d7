//! The model's residency on the fleet, as a request asks for it: how long
//! it stays loaded after its last request (Ollama's `keep_alive`), loaded
//! now, unloaded now, and the context it is served with. Dialects reach
//! the fleet's placement only through here.

use crate::api::{ApiError, AppState};
pub use crate::fleet::placement::KeepAlive;

/// Keeps `model` loaded for `keep` after its last request (the fleet's
/// default when `None`).
pub fn keep_for(state: &AppState, model: &str, keep: Option<KeepAlive>) {
    state.fleet.set_keep_alive(model, keep);
}

/// Whether `keep` asks for the model to be unloaded now (`keep_alive: 0`).
pub fn unloads(keep: Option<KeepAlive>) -> bool {
    keep == Some(KeepAlive::For(std::time::Duration::ZERO))
}

/// Waits until a node serves `model` (loading it where the fleet may).
pub async fn load(state: &AppState, model: &str) -> Result<(), ApiError> {
    state.fleet.ready(model).await?;
    Ok(())
}

/// Tells every node serving `model` to unload it; the nodes told.
pub fn unload(state: &AppState, model: &str) -> Result<Vec<String>, ApiError> {
    Ok(state.fleet.unload_model(model, None)?)
}

/// The context `model` is served with, when a node serves it now.
pub fn context(state: &AppState, model: &str) -> Option<u32> {
    state.fleet.context_len(model)
}
