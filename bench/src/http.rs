//! The workload over HTTP, against any OpenAI-compatible `/v1/completions`
//! that streams (superfluid serve, llama-server).

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use futures::StreamExt;
use serde_json::{json, Value};

use crate::stats::RequestTiming;

/// A server process, killed on drop.
pub struct ServerProcess {
    child: Child,
    pub base: String,
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Starts `binary` with `args` (where `{port}` is replaced) and waits until
/// its `/health` answers 200.
pub async fn start(binary: &Path, args: &[String]) -> Result<ServerProcess> {
    start_until(binary, args, "/health").await
}

/// Starts `binary` with `args` and `base`, killed on drop.
pub fn spawn(binary: &Path, args: &[String], base: String) -> Result<ServerProcess> {
    let child = Command::new(binary)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("starting {}", binary.display()))?;
    Ok(ServerProcess { child, base })
}

/// Starts `binary` with `args` (where `{port}` is replaced) and waits until
/// a GET of `path` answers 200.
pub async fn start_until(binary: &Path, args: &[String], path: &str) -> Result<ServerProcess> {
    let port = free_port()?;
    let args: Vec<String> = args
        .iter()
        .map(|a| a.replace("{port}", &port.to_string()))
        .collect();
    let server = spawn(binary, &args, format!("http://127.0.0.1:{port}"))?;
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    while Instant::now() < deadline {
        if let Ok(r) = client.get(format!("{}{path}", server.base)).send().await {
            if r.status().is_success() {
                return Ok(server);
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bail!("{} did not answer {path} within 120 s", binary.display())
}

/// One streamed completion, with `key` as a Bearer key if there is one;
/// `prompt_tokens` is the bench's own count, used when the server does not
/// report usage.
pub async fn complete(
    client: &reqwest::Client,
    base: &str,
    model: &str,
    key: Option<&str>,
    prompt: &str,
    prompt_tokens: u32,
    max_tokens: u32,
) -> Result<RequestTiming> {
    let body = json!({
        "model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
        "stream": true, "stream_options": {"include_usage": true},
    });
    let start = Instant::now();
    let mut request = client.post(format!("{base}/v1/completions")).json(&body);
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    let resp = request.send().await?;
    if !resp.status().is_success() {
        bail!("{base} answered {}: {}", resp.status(), resp.text().await?);
    }
    let mut stream = resp.bytes_stream();
    let mut buf = Vec::new();
    let (mut first, mut last) = (None, start);
    let (mut chunks, mut usage_tokens) = (0u32, None);
    while let Some(bytes) = stream.next().await {
        buf.extend_from_slice(&bytes?);
        for chunk in drain_chunks(&mut buf)? {
            if let Some(n) = chunk["usage"]["completion_tokens"].as_u64() {
                usage_tokens = Some(n as u32);
            }
            let piece = chunk["choices"][0]["text"].as_str().unwrap_or("");
            if !piece.is_empty() {
                let now = Instant::now();
                first.get_or_insert(now);
                last = now;
                chunks += 1;
            }
        }
    }
    let first = first.unwrap_or(last);
    Ok(RequestTiming {
        ttft: first - start,
        decode: last - first,
        tokens: usage_tokens.unwrap_or(chunks),
        prompt_tokens,
    })
}

/// Takes every complete server-sent event out of `buf` and returns the JSON
/// of its `data:` line; `[DONE]` and lines without data are skipped. An
/// incomplete event stays in `buf` for the next bytes.
pub fn drain_chunks(buf: &mut Vec<u8>) -> Result<Vec<Value>> {
    let mut chunks = Vec::new();
    while let Some(end) = buf.windows(2).position(|w| w == b"\n\n") {
        let event: Vec<u8> = buf.drain(..end + 2).collect();
        let text = String::from_utf8_lossy(&event);
        let Some(data) = text.trim().strip_prefix("data:") else {
            continue;
        };
        let data = data.trim();
        if data == "[DONE]" {
            continue;
        }
        chunks.push(serde_json::from_str(data).with_context(|| format!("bad chunk {data}"))?);
    }
    Ok(chunks)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn complete_events_are_parsed_and_a_partial_one_waits() {
        let mut buf = b"data: {\"a\":1}\n\ndata: [DONE]\n\n: comment\n\ndata: {\"b\"".to_vec();
        let chunks = drain_chunks(&mut buf).unwrap();
        assert_eq!(chunks, vec![json!({"a": 1})]);
        assert_eq!(buf, b"data: {\"b\"");
        buf.extend_from_slice(b":2}\n\n");
        assert_eq!(drain_chunks(&mut buf).unwrap(), vec![json!({"b": 2})]);
        assert!(drain_chunks(&mut b"data: nope\n\n".to_vec()).is_err());
    }
}
