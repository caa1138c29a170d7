//! Embeddings on a node: routed like a generation (same candidates,
//! admission and in-flight count), sent on a stream of its own, answered
//! with one [`EmbedReply`].

use std::sync::Arc;

use superfluid_link::{control::STREAM_CANCELLED, read_frame, write_frame};
use superfluid_proto::{EmbedReply, EmbedRequest, HeadStream};

use super::error::FleetError;
use super::registry::NodeEntry;
use super::remote::Routing;
use super::Fleet;
use crate::metrics::Refusal;

/// A node's answer to an embeddings request.
#[derive(Debug)]
pub struct Embedded {
    /// What the node answered: the vectors, or why it could not.
    pub reply: EmbedReply,
    /// The name of the node that answered.
    pub node_name: String,
}

impl Fleet {
    /// Sends `request` to a node serving its model, the one the router
    /// picks, and waits for its reply. If a node's connection fails before
    /// it has the request, another is tried; a node lost after that fails
    /// the request with [`FleetError::NodeLost`] (embeddings are cheap to
    /// ask again, and the client may). Dropping the future cancels the
    /// request on the node.
    pub async fn embed(&self, request: &EmbedRequest) -> Result<Embedded, FleetError> {
        // The router weighs a request by its tokens; it has no cache to match.
        let tokens: Vec<u32> = request.inputs.iter().flatten().copied().collect();
        let mut tried = Vec::new();
        let mut last_error = None;
        while let Some((node, routing, _)) = self.route_prompt(&request.model, &tokens, &tried) {
            match ask(&node, routing, request).await {
                Ok(Some(reply)) => {
                    if let EmbedReply::Embeddings { prompt_tokens, .. } = &reply {
                        self.metrics
                            .record_finished(&request.model, *prompt_tokens, 0);
                    } else {
                        self.metrics.record_failed();
                    }
                    return Ok(Embedded {
                        reply,
                        node_name: node.name.clone(),
                    });
                }
                Ok(None) => {
                    tracing::warn!(node = %node.name, "could not send embeddings to a node; trying another");
                    tried.push(node.node_id.clone());
                    last_error = Some(lost(&node, "its connection failed".into()));
                }
                Err(error) => {
                    self.metrics.record_failed();
                    return Err(error);
                }
            }
        }
        let error = last_error.unwrap_or_else(|| self.unserved(&request.model, &tried));
        if matches!(error, FleetError::Busy { .. }) {
            self.metrics.overload.record_refused(Refusal::FleetBusy);
        }
        Err(error)
    }
}

fn lost(node: &NodeEntry, reason: String) -> FleetError {
    FleetError::NodeLost {
        node: node.name.clone(),
        reason,
    }
}

/// The node's reply; `Ok(None)` if the request never reached it, so that
/// another node may take it.
async fn ask(
    node: &Arc<NodeEntry>,
    mut routing: Routing,
    request: &EmbedRequest,
) -> Result<Option<EmbedReply>, FleetError> {
    let Ok((mut send, mut recv)) = node.connection.open_bi().await else {
        return Ok(None);
    };
    if write_frame(&mut send, &HeadStream::Embed(request.clone()))
        .await
        .is_err()
        || send.finish().is_err()
    {
        return Ok(None);
    }
    // Reset the stream if this future is dropped before the reply: the
    // node then drops the request.
    let mut guard = CancelOnDrop(Some(send));
    let reply = read_frame::<EmbedReply>(&mut recv).await;
    guard.0 = None;
    match reply {
        Ok(Some(reply)) => {
            routing.finished(true);
            node.served();
            Ok(Some(reply))
        }
        Ok(None) => Err(lost(
            node,
            "the node ended the embeddings stream without a reply".into(),
        )),
        Err(e) => Err(lost(node, e.to_string())),
    }
}

struct CancelOnDrop(Option<superfluid_link::quinn::SendStream>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some(mut send) = self.0.take() {
            let _ = send.reset(STREAM_CANCELLED);
        }
    }
}
