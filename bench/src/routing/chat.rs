//! One streamed chat completion over HTTP, timed as a user sees it.

use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use futures::StreamExt;
use serde_json::{json, Value};

/// The response header naming the node that served a generation.
pub const NODE_HEADER: &str = "x-superfluid-node";

/// What one streamed chat completion returned.
#[derive(Debug, Clone)]
pub struct Reply {
    /// From sending the request to the first chunk with content.
    pub ttft: Duration,
    /// The generated text.
    pub content: String,
    /// From the final usage chunk.
    pub prompt_tokens: u32,
    pub cached_tokens: u32,
    pub completion_tokens: u32,
    /// The node that served it, from [`NODE_HEADER`].
    pub node: String,
}

/// Sends `messages` (role, content) to `/v1/chat/completions`, greedy,
/// streamed with usage, and reads the stream to its end.
pub async fn complete(
    client: &reqwest::Client,
    base: &str,
    model: &str,
    messages: &[(String, String)],
    max_tokens: u32,
) -> Result<Reply> {
    let messages: Vec<Value> = messages
        .iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect();
    let body = json!({
        "model": model, "messages": messages, "max_tokens": max_tokens, "temperature": 0,
        "stream": true, "stream_options": {"include_usage": true},
    });
    let start = Instant::now();
    let resp = client
        .post(format!("{base}/v1/chat/completions"))
        .json(&body)
        .send()
        .await?;
    if !resp.status().is_success() {
        bail!(
            "the head answered {}: {}",
            resp.status(),
            resp.text().await?
        );
    }
    let node = resp
        .headers()
        .get(NODE_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let mut stream = resp.bytes_stream();
    let mut buf = Vec::new();
    let mut first = None;
    let mut content = String::new();
    let mut usage = None;
    while let Some(bytes) = stream.next().await {
        buf.extend_from_slice(&bytes?);
        for chunk in crate::http::drain_chunks(&mut buf)? {
            if chunk.get("error").is_some() {
                bail!("the stream failed: {chunk}");
            }
            if chunk["usage"].is_object() {
                usage = Some(chunk["usage"].clone());
            }
            let piece = chunk["choices"][0]["delta"]["content"]
                .as_str()
                .unwrap_or("");
            if !piece.is_empty() {
                first.get_or_insert_with(Instant::now);
                content.push_str(piece);
            }
        }
    }
    let Some(usage) = usage else {
        bail!("the stream ended without a usage chunk");
    };
    let count = |v: &Value| v.as_u64().and_then(|n| u32::try_from(n).ok());
    let (Some(prompt_tokens), Some(completion_tokens)) = (
        count(&usage["prompt_tokens"]),
        count(&usage["completion_tokens"]),
    ) else {
        bail!("the usage chunk lacks token counts: {usage}");
    };
    Ok(Reply {
        ttft: first.unwrap_or_else(Instant::now) - start,
        content,
        prompt_tokens,
        cached_tokens: count(&usage["prompt_tokens_details"]["cached_tokens"]).unwrap_or(0),
        completion_tokens,
        node,
    })
}
