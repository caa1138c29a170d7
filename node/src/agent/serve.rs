//! One generation stream: read the request, run it, forward its events.

use crate::engine::Engine;
use crate::models::ModelSet;
use superfluid_link::{
    control::{STREAM_BAD_FRAME, STREAM_CANCELLED},
    quinn::{RecvStream, SendStream},
    read_frame, write_frame, FrameIoError,
};
use superfluid_proto::{EmbedReply, EmbedRequest, FailureKind, GenerateEvent, HeadStream};

/// The longest a finished stream waits for the head to acknowledge its
/// last event.
const DELIVERY_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Serves one stream the head opened. Each event is written as soon as the
/// engine yields it. If the head stops reading or resets the stream, the
/// [`crate::engine::Generation`] is dropped at once, which cancels it.
pub(super) async fn serve_stream(models: &ModelSet, mut send: SendStream, mut recv: RecvStream) {
    let request = match read_frame::<HeadStream>(&mut recv).await {
        Ok(Some(HeadStream::Generate(request))) => request,
        Ok(Some(HeadStream::Embed(request))) => {
            let Some(engine) = models.engine(&request.model) else {
                let message = not_loaded(models, &request.model);
                let kind = FailureKind::UnknownModel;
                return answer_once(send, &EmbedReply::Failed { kind, message }).await;
            };
            return serve_embed(&*engine, request, send, recv).await;
        }
        Ok(None) => {
            let _ = send.reset(STREAM_BAD_FRAME);
            return;
        }
        Err(FrameIoError::Frame(e)) => {
            tracing::warn!(error = %e, "bad generation request from the head; closing its stream");
            let _ = recv.stop(STREAM_BAD_FRAME);
            let _ = send.reset(STREAM_BAD_FRAME);
            return;
        }
        Err(e) => {
            tracing::debug!(error = %e, "generation stream failed before its request");
            return;
        }
    };
    let Some(engine) = models.engine(&request.model) else {
        let message = not_loaded(models, &request.model);
        let kind = FailureKind::UnknownModel;
        return answer_once(send, &GenerateEvent::Failed { kind, message }).await;
    };
    let mut generation = match engine.submit(request) {
        Ok(generation) => generation,
        Err(err) => {
            let failed = GenerateEvent::Failed {
                kind: err.failure_kind(),
                message: err.to_string(),
            };
            if write_frame(&mut send, &failed).await.is_ok() {
                let _ = send.finish();
            }
            return;
        }
    };
    let stopped = send.stopped();
    tokio::pin!(stopped);
    let reset = head_reset(recv);
    tokio::pin!(reset);
    loop {
        let event = tokio::select! {
            biased;
            _ = &mut stopped => {
                tracing::debug!("the head stopped reading; cancelling the generation");
                return;
            }
            () = &mut reset => {
                tracing::debug!("the head reset the stream; cancelling the generation");
                let _ = send.reset(STREAM_CANCELLED);
                return;
            }
            event = generation.events.recv() => event,
        };
        let event = event.unwrap_or_else(|| GenerateEvent::Failed {
            kind: FailureKind::Stopped,
            message: "the engine stopped mid-generation".into(),
        });
        let last = !matches!(event, GenerateEvent::Tokens(_) | GenerateEvent::Logprobs(_));
        // The engine hands out one step's tokens together: let the other
        // streams take theirs first, so that they all leave in one packet.
        tokio::task::yield_now().await;
        if let Err(e) = write_frame(&mut send, &event).await {
            tracing::debug!(error = %e, "could not send an event; cancelling the generation");
            return;
        }
        if last {
            let _ = send.finish();
            // Count as running until the head has the last event: a
            // draining node closes its connection once nothing runs, and
            // closing drops stream data not yet sent.
            let _ = tokio::time::timeout(DELIVERY_WAIT, &mut stopped).await;
            return;
        }
    }
}

/// Serves one embeddings request: its one reply, or nothing if the head
/// resets the stream first (which drops the request).
async fn serve_embed(
    engine: &dyn Engine,
    request: EmbedRequest,
    mut send: SendStream,
    recv: RecvStream,
) {
    let reply = match engine.embed(request) {
        Ok(pending) => {
            let reset = head_reset(recv);
            tokio::select! {
                () = reset => {
                    let _ = send.reset(STREAM_CANCELLED);
                    return;
                }
                reply = pending => reply.unwrap_or_else(|_| EmbedReply::Failed {
                    kind: FailureKind::Stopped,
                    message: "the engine stopped while computing the embeddings".into(),
                }),
            }
        }
        Err(err) => EmbedReply::Failed {
            kind: err.failure_kind(),
            message: err.to_string(),
        },
    };
    if write_frame(&mut send, &reply).await.is_ok() {
        let _ = send.finish();
        let _ = tokio::time::timeout(DELIVERY_WAIT, send.stopped()).await;
    }
}

/// Answers a stream with its one frame, `answer`, and ends it.
async fn answer_once<T: serde::Serialize>(mut send: SendStream, answer: &T) {
    if write_frame(&mut send, answer).await.is_ok() {
        let _ = send.finish();
    }
}

/// Why a request for `model` finds no engine here.
fn not_loaded(models: &ModelSet, model: &str) -> String {
    let loaded: Vec<String> = models.descriptions().into_iter().map(|m| m.id).collect();
    format!(
        "this node does not have model {model:?} loaded; it serves {}",
        if loaded.is_empty() {
            "none".to_owned()
        } else {
            loaded.join(", ")
        }
    )
}

/// Completes when the head resets its side of the stream (or the connection
/// fails); never after a clean end, which only means the request is complete.
async fn head_reset(mut recv: RecvStream) {
    let mut scratch = [0u8; 64];
    loop {
        match recv.read(&mut scratch).await {
            Ok(Some(_)) => {}
            Ok(None) => std::future::pending::<()>().await,
            Err(_) => return,
        }
    }
}
