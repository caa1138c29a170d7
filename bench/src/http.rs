//! The workload over HTTP, streamed through any of the APIs in
//! [`crate::apis`] (superfluid serve, llama-server).

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use futures::StreamExt;
use serde_json::Value;

use crate::apis::{Api, Framing};
use crate::stats::RequestTiming;

/// A server process, killed on drop.
pub struct ServerProcess {
    child: Child,
    pub base: String,
}

impl ServerProcess {
    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
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

/// One streamed greedy answer to `prompt` through `api`, with `key` as a
/// Bearer key if there is one; `prompt_tokens` is the bench's own count.
#[allow(clippy::too_many_arguments)]
pub async fn complete(
    client: &reqwest::Client,
    api: Api,
    base: &str,
    model: &str,
    key: Option<&str>,
    prompt: &str,
    prompt_tokens: u32,
    max_tokens: u32,
) -> Result<RequestTiming> {
    let (path, body) = api.request(model, prompt, max_tokens);
    let streamed = stream(client, api, &format!("{base}{path}"), &body, key).await?;
    Ok(RequestTiming {
        prompt_tokens,
        ..streamed.timing
    })
}

/// What one streamed answer took, and its text.
pub struct Streamed {
    /// `prompt_tokens` is 0: the caller knows the prompt.
    pub timing: RequestTiming,
    pub text: String,
}

/// Sends `body` to `url` (an endpoint of `api`, streamed) and times the
/// answer: the first text, the last, and the tokens the server counted
/// (the text chunks when it counts none).
pub async fn stream(
    client: &reqwest::Client,
    api: Api,
    url: &str,
    body: &Value,
    key: Option<&str>,
) -> Result<Streamed> {
    let start = Instant::now();
    let mut request = client.post(url).json(body);
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    let resp = request.send().await?;
    if !resp.status().is_success() {
        bail!("{url} answered {}: {}", resp.status(), resp.text().await?);
    }
    let mut stream = resp.bytes_stream();
    let mut buf = Vec::new();
    let (mut first, mut last) = (None, start);
    let (mut chunks, mut usage_tokens) = (0u32, None);
    let mut text = String::new();
    while let Some(bytes) = stream.next().await {
        buf.extend_from_slice(&bytes?);
        let drained = match api.framing() {
            Framing::Sse => drain_chunks(&mut buf)?,
            Framing::Ndjson => drain_lines(&mut buf)?,
        };
        for chunk in drained {
            let piece = api.read(&chunk);
            if let Some(n) = piece.tokens {
                usage_tokens = Some(n);
            }
            if let Some(piece) = piece.text.filter(|t| !t.is_empty()) {
                let now = Instant::now();
                first.get_or_insert(now);
                last = now;
                chunks += 1;
                text.push_str(piece);
            }
        }
    }
    let first = first.unwrap_or(last);
    Ok(Streamed {
        timing: RequestTiming {
            ttft: first - start,
            decode: last - first,
            tokens: usage_tokens.unwrap_or(chunks),
            prompt_tokens: 0,
        },
        text,
    })
}

/// Takes every complete line out of `buf` and returns its JSON; blank
/// lines are skipped, an incomplete line stays in `buf`.
pub fn drain_lines(buf: &mut Vec<u8>) -> Result<Vec<Value>> {
    let mut chunks = Vec::new();
    while let Some(end) = buf.iter().position(|&b| b == b'\n') {
        let line: Vec<u8> = buf.drain(..end + 1).collect();
        let text = String::from_utf8_lossy(&line);
        let text = text.trim();
        if !text.is_empty() {
            chunks.push(serde_json::from_str(text).with_context(|| format!("bad line {text}"))?);
        }
    }
    Ok(chunks)
}

/// Takes every complete server-sent event out of `buf` and returns the JSON
/// of its `data:` line; `[DONE]` and events without data are skipped. An
/// incomplete event stays in `buf` for the next bytes.
pub fn drain_chunks(buf: &mut Vec<u8>) -> Result<Vec<Value>> {
    let mut chunks = Vec::new();
    while let Some(end) = buf.windows(2).position(|w| w == b"\n\n") {
        let event: Vec<u8> = buf.drain(..end + 2).collect();
        let text = String::from_utf8_lossy(&event);
        // An `event:` line may come first (Anthropic's stream has one).
        let Some(data) = text.lines().find_map(|l| l.strip_prefix("data:")) else {
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
    use serde_json::json;

    #[test]
    fn complete_events_are_parsed_and_a_partial_one_waits() {
        let mut buf = b"data: {\"a\":1}\n\ndata: [DONE]\n\n: comment\n\ndata: {\"b\"".to_vec();
        let chunks = drain_chunks(&mut buf).unwrap();
        assert_eq!(chunks, vec![json!({"a": 1})]);
        assert_eq!(buf, b"data: {\"b\"");
        buf.extend_from_slice(b":2}\n\n");
        assert_eq!(drain_chunks(&mut buf).unwrap(), vec![json!({"b": 2})]);
        assert!(drain_chunks(&mut b"data: nope\n\n".to_vec()).is_err());
        let mut named = b"event: ping\ndata: {\"c\":3}\n\nevent: done\n\n".to_vec();
        assert_eq!(drain_chunks(&mut named).unwrap(), vec![json!({"c": 3})]);
    }

    #[test]
    fn complete_lines_are_parsed_and_a_partial_one_waits() {
        let mut buf = b"{\"a\":1}\n\n{\"b\"".to_vec();
        assert_eq!(drain_lines(&mut buf).unwrap(), vec![json!({"a": 1})]);
        buf.extend_from_slice(b":2}\n");
        assert_eq!(drain_lines(&mut buf).unwrap(), vec![json!({"b": 2})]);
        assert!(drain_lines(&mut b"nope\n".to_vec()).is_err());
    }
}
