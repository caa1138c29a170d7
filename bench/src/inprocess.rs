//! The workload against the engine called in-process: no head, no QUIC, no
//! HTTP. The baseline superfluid's own overhead is measured against.

use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Result};
use superfluid_node::Engine;
use superfluid_proto::{GenerateEvent, GenerateRequest, Sampling};

use crate::stats::RequestTiming;

/// A greedy generation of `prompt` on `model`, run in `slot` if given.
pub fn greedy(
    model: &str,
    prompt: Vec<u32>,
    max_tokens: u32,
    slot: Option<u32>,
) -> GenerateRequest {
    GenerateRequest {
        model: model.to_owned(),
        prompt,
        sampling: Sampling {
            temperature: 0.0,
            ..Sampling::default()
        },
        max_tokens,
        slot,
        constraint: None,
        logprobs: None,
    }
}

/// One greedy generation of `prompt`, timed as a client would see it.
pub async fn complete(
    engine: &Arc<dyn Engine>,
    prompt: Vec<u32>,
    max_tokens: u32,
) -> Result<RequestTiming> {
    let prompt_tokens = prompt.len() as u32;
    let request = greedy(&engine.info().model.id, prompt, max_tokens, None);
    let start = Instant::now();
    let mut generation = engine.submit(request)?;
    let (mut first, mut last, mut tokens) = (None, start, 0u32);
    while let Some(event) = generation.events.recv().await {
        match event {
            GenerateEvent::Tokens(ids) => {
                let now = Instant::now();
                first.get_or_insert(now);
                last = now;
                tokens += ids.len() as u32;
            }
            GenerateEvent::Logprobs(_) => {}
            GenerateEvent::Finished(_) => break,
            GenerateEvent::Failed { message, .. } => bail!("generation failed: {message}"),
        }
    }
    let first = first.unwrap_or(last);
    Ok(RequestTiming {
        ttft: first - start,
        decode: last - first,
        tokens,
        prompt_tokens,
    })
}
