//! The last requests the head answered, for the status page and
//! `superfluid top`: a bounded ring of [`RecentRequest`]s.
//!
//! A layer around the client routes enters each generation request
//! (every `POST`) in the ring as it is answered, with its status. Its node,
//! time to first token and token counts are known only later (a streamed
//! answer has its status long before its tokens), so the entry is shared:
//! the [`Generation`](super::generate::Generation) serving the request
//! finds it as [`current`] and fills it in as it runs.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::extract::{MatchedPath, Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;
use serde::{Deserialize, Serialize};
use superfluid_link::sync::lock;

use super::output::Usage;
use super::request_metrics::{RequestModel, UNMATCHED};

/// How many requests the ring keeps.
pub const KEPT: usize = 50;

/// One answered request, as the status page shows it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RecentRequest {
    /// When it arrived, in milliseconds since the Unix epoch.
    pub unix_ms: u64,
    /// The route it matched, as `/v1/chat/completions`.
    pub endpoint: String,
    /// The served model it named; empty if it named none the head serves.
    pub model: String,
    /// The HTTP status of the answer.
    pub status: u16,
    /// The node that served it; empty if none did.
    pub node: String,
    /// Tokens in its prompt.
    pub prompt_tokens: u32,
    /// Prompt tokens the node found in its KV cache.
    pub cached_tokens: u32,
    /// Tokens generated so far (final once the answer ended).
    pub completion_tokens: u32,
    /// Milliseconds from dispatch to the first token; `None` until it came.
    pub ttft_ms: Option<f64>,
}

/// A request's entry in the ring, shared with the generation serving it.
#[derive(Debug, Clone, Default)]
pub struct RequestNote(Arc<Mutex<RecentRequest>>);

impl RequestNote {
    fn update(&self, change: impl FnOnce(&mut RecentRequest)) {
        change(&mut lock(&self.0));
    }

    /// The model and node a generation was sent to.
    pub fn dispatched(&self, model: &str, node: &str) {
        self.update(|r| {
            r.model = model.to_owned();
            r.node = node.to_owned();
        });
    }

    /// The first token came `ttft_ms` after dispatch.
    pub fn first_token(&self, ttft_ms: f64) {
        self.update(|r| r.ttft_ms = Some(ttft_ms));
    }

    /// The generation's token counts and node, when it ends.
    pub fn ended(&self, usage: Usage, node: &str) {
        self.update(|r| {
            r.prompt_tokens = usage.prompt_tokens;
            r.cached_tokens = usage.cached_tokens;
            r.completion_tokens = usage.completion_tokens;
            r.node = node.to_owned();
        });
    }

    /// What the entry holds now.
    pub fn read(&self) -> RecentRequest {
        lock(&self.0).clone()
    }
}

tokio::task_local! {
    static CURRENT: RequestNote;
}

/// The entry of the request whose handler is running, if the ring's layer
/// is in front of it.
pub fn current() -> Option<RequestNote> {
    CURRENT.try_with(Clone::clone).ok()
}

/// The last [`KEPT`] requests, newest last.
#[derive(Debug, Default)]
pub struct Recent {
    ring: Mutex<VecDeque<RequestNote>>,
}

impl Recent {
    /// Enters `note`, dropping the oldest entry once [`KEPT`] are held.
    pub fn push(&self, note: RequestNote) {
        let mut ring = lock(&self.ring);
        if ring.len() == KEPT {
            ring.pop_front();
        }
        ring.push_back(note);
    }

    /// The requests held, newest first.
    pub fn list(&self) -> Vec<RecentRequest> {
        let notes: Vec<RequestNote> = lock(&self.ring).iter().rev().cloned().collect();
        notes.iter().map(RequestNote::read).collect()
    }
}

/// The layer: a `POST` (a generation request) is entered in the ring once
/// answered; its handler finds its entry through [`current`].
pub async fn record(State(recent): State<Arc<Recent>>, request: Request, next: Next) -> Response {
    if request.method() != Method::POST {
        return next.run(request).await;
    }
    let endpoint = request
        .extensions()
        .get::<MatchedPath>()
        .map_or(UNMATCHED, MatchedPath::as_str)
        .to_owned();
    let model = request.extensions().get::<RequestModel>().cloned();
    let note = RequestNote(Arc::new(Mutex::new(RecentRequest {
        unix_ms: unix_ms(SystemTime::now()),
        endpoint,
        ..RecentRequest::default()
    })));
    let response = CURRENT.scope(note.clone(), next.run(request)).await;
    note.update(|r| {
        r.status = response.status().as_u16();
        if r.model.is_empty() {
            r.model = model.as_ref().map_or("", RequestModel::get).to_owned();
        }
    });
    recent.push(note);
    response
}

fn unix_ms(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ring_keeps_the_newest_requests_newest_first() {
        let recent = Recent::default();
        for n in 0..(KEPT as u64 + 5) {
            recent.push(RequestNote(Arc::new(Mutex::new(RecentRequest {
                unix_ms: n,
                ..RecentRequest::default()
            }))));
        }
        let list = recent.list();
        assert_eq!(list.len(), KEPT);
        assert_eq!(list[0].unix_ms, KEPT as u64 + 4);
        assert_eq!(list[KEPT - 1].unix_ms, 5);
    }

    #[test]
    fn a_generation_fills_in_the_entry_after_it_was_entered() {
        let recent = Recent::default();
        let note = RequestNote::default();
        recent.push(note.clone());
        note.dispatched("m", "n1");
        note.first_token(12.5);
        note.ended(
            Usage {
                prompt_tokens: 7,
                cached_tokens: 3,
                completion_tokens: 2,
            },
            "n1",
        );
        let entry = &recent.list()[0];
        assert_eq!(entry.node, "n1");
        assert_eq!(entry.ttft_ms, Some(12.5));
        assert_eq!(
            (
                entry.prompt_tokens,
                entry.cached_tokens,
                entry.completion_tokens
            ),
            (7, 3, 2)
        );
    }
}
