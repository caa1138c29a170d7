//! Runs a response's generation in its own task. A stored response is
//! generated to its end and committed even when its client goes away; an
//! unstored one stops when nobody listens.

use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::super::generate::answer::{Answer, Output};
use super::super::generate::{Generation, Usage};
use super::super::output::FinishReason;
use super::super::sessions::bodies;
use super::super::ApiError;
use super::reply::{ResponseView, Status};
use crate::sessions::{EventId, EventKind, GenerationGuard, SessionStore};

/// A stored response's hold on its session until its answer is committed.
pub struct Hold {
    /// The store.
    pub store: SessionStore,
    /// The hold.
    pub guard: GenerationGuard,
    /// The turn's first event (its first input message): a failure names
    /// it, and replays drop the turn from there.
    pub turn: EventId,
}

/// What the generation task tells the answer.
pub enum Progress {
    /// Text as the model produced it.
    Text(String),
    /// The end: the whole text, why it ended, the token counts; for a
    /// stored response, after its answer is committed.
    Done {
        /// The whole answer.
        text: String,
        /// Why it ended.
        finish: FinishReason,
        /// Token counts.
        usage: Usage,
    },
    /// The generation or its commit failed.
    Failed(ApiError),
}

/// Starts the task; its progress arrives on the receiver.
pub fn spawn(hold: Option<Hold>, generation: Generation) -> mpsc::Receiver<Progress> {
    let (tx, rx) = mpsc::channel(64);
    tokio::spawn(run(hold, generation, tx));
    rx
}

async fn run(hold: Option<Hold>, generation: Generation, tx: mpsc::Sender<Progress>) {
    // The response keeps the model's whole text, calls included, and reads
    // its calls from it (`reply`), stored or streamed alike.
    let mut answer = Answer::new(generation, None);
    let mut text = String::new();
    let finish = loop {
        match answer.next().await {
            Ok(Output::Text(piece)) => {
                text.push_str(&piece);
                let gone = tx.send(Progress::Text(piece)).await.is_err();
                if gone && hold.is_none() {
                    // Dropping the generation cancels it on the node.
                    return;
                }
            }
            // Without tools on the path no call comes; the Responses API
            // has no log-probabilities to ask for.
            Ok(
                Output::Logprobs(_)
                | Output::CallStart { .. }
                | Output::CallArguments { .. }
                | Output::CallEnd { .. },
            ) => {}
            Ok(Output::Done(finish)) => break finish,
            Err(err) => {
                drop(answer);
                if let Some(hold) = hold {
                    record_failure(hold, &err).await;
                }
                let _ = tx.send(Progress::Failed(err)).await;
                return;
            }
        }
    };
    let usage = answer.generation().usage();
    let node = answer.generation().node.clone();
    drop(answer);
    if let Some(Hold { store, guard, .. }) = hold {
        let mut body = bodies::generated(&text, finish, &usage);
        body["node"] = json!(node);
        let committed = store
            .append_generated(&guard, EventKind::Generated, body)
            .await;
        drop(guard);
        if let Err(err) = committed {
            let _ = tx.send(Progress::Failed(err.into())).await;
            return;
        }
    }
    let _ = tx
        .send(Progress::Done {
            text,
            finish,
            usage,
        })
        .await;
}

/// Ends a stored turn whose generation failed with a `generation_failed`
/// event, so that the conversation's replays leave the turn out.
async fn record_failure(hold: Hold, err: &ApiError) {
    let body = bodies::failed(&err.body(), hold.turn);
    let recorded = hold
        .store
        .append_generated(&hold.guard, EventKind::GenerationFailed, body)
        .await;
    if let Err(error) = recorded {
        tracing::warn!(session = %hold.guard.session(), %error, "the failed response could not be recorded");
    }
}

/// `view` completed with what the task reports.
pub fn finished(
    mut view: ResponseView,
    text: String,
    finish: FinishReason,
    usage: Usage,
) -> ResponseView {
    view.status = Status::of(finish);
    view.text = Some(text);
    view.usage = Some(usage);
    view
}

/// The whole response, once the task is done.
pub async fn collect(
    view: ResponseView,
    mut progress: mpsc::Receiver<Progress>,
) -> Result<Value, ApiError> {
    while let Some(step) = progress.recv().await {
        match step {
            Progress::Text(_) => {}
            Progress::Done {
                text,
                finish,
                usage,
            } => return Ok(finished(view, text, finish, usage).body()),
            Progress::Failed(err) => return Err(err),
        }
    }
    Err(ApiError::Generation {
        message: "the generation ended without an answer; send the request again".to_owned(),
    })
}
