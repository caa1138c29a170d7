//! What the node does with the head's placements: load a model (fetching
//! its file over this connection first if the node lacks it) or unload one.
//!
//! The head learns the outcome from the control stream's writer, which
//! sends a [`ModelsReport`] whenever the set of loaded models changes; a
//! load that fails is reported here, with its reason, so the head stops
//! waiting for it.

use std::sync::Arc;

use superfluid_link::transfer::TransferClient;
use superfluid_proto::{ControlMsg, ModelOffer, ModelsReport, Placement};
use tokio::sync::mpsc;

use crate::model_cache::fetch;
use crate::models::ModelSet;

/// Carries out `placement`; reports go out through `outbox`.
pub(super) async fn apply(
    models: Arc<ModelSet>,
    conn: superfluid_link::quinn::Connection,
    tcp: Option<TransferClient>,
    placement: Placement,
    outbox: mpsc::Sender<ControlMsg>,
) {
    match placement {
        Placement::Unload(id) => {
            if models.remove(&id) {
                tracing::info!(model = %id, "the head unloaded a model from this node");
            }
        }
        Placement::Load(offer) => {
            if models.contains(&offer.id) {
                // Already here: say so, so that the head stops waiting.
                let _ = outbox.send(report(&models, None)).await;
                return;
            }
            if !models.start_loading(&offer.id) {
                return;
            }
            let loaded = load(&models, &conn, tcp.as_ref(), &offer, &outbox).await;
            models.done_loading(&offer.id);
            if let Err(reason) = loaded {
                tracing::warn!(model = %offer.id, %reason, "could not load a model the head placed here");
                let _ = outbox
                    .send(report(&models, Some((offer.id.clone(), reason))))
                    .await;
            }
        }
    }
}

/// Fetches `offer` if needed, loads it and adds it to `models`.
async fn load(
    models: &Arc<ModelSet>,
    conn: &superfluid_link::quinn::Connection,
    tcp: Option<&TransferClient>,
    offer: &ModelOffer,
    outbox: &mpsc::Sender<ControlMsg>,
) -> Result<(), String> {
    let Some(loader) = models.loader() else {
        return Err(
            "this node does not load models on demand (it runs a fixed engine); start it with `superfluid node` or `fleet join`"
                .into(),
        );
    };
    let path = match (models.file_for(offer), models.cache()) {
        (Some(path), _) => path,
        (None, None) => {
            return Err(format!(
                "this node has no file for {} and no model cache to fetch it into; start a node with `superfluid node` or `fleet join` to serve it",
                offer.id
            ))
        }
        (None, Some(cache)) => {
            tracing::info!(model = %offer.id, size = offer.size, "fetching a model the head placed here");
            fetch(conn, tcp, cache, offer, |progress| {
                // A full queue only drops a report; a later one says more.
                let _ = outbox.try_send(ControlMsg::Fetching(progress));
            })
            .await
            .map_err(|e| e.to_string())?
        }
    };
    tracing::info!(model = %offer.id, path = %path.display(), "loading a model the head placed here");
    let (loader, id, file) = (loader.clone(), offer.id.clone(), path.clone());
    let engine = tokio::task::spawn_blocking(move || loader.load(&id, &file))
        .await
        .map_err(|e| format!("the loading thread failed: {e}"))??;
    models.insert(engine, Some(offer.sha256.clone()), Some(path));
    tracing::info!(model = %offer.id, "loaded");
    Ok(())
}

/// The report of what `models` holds now, with a failed load if any.
pub(super) fn report(models: &ModelSet, failed: Option<(String, String)>) -> ControlMsg {
    ControlMsg::Models(ModelsReport {
        models: models.descriptions(),
        free_memory: crate::hardware::free_memory(),
        on_disk: models.on_disk(),
        failed,
    })
}
