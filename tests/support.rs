//! Starting `superfluid serve` on a free port and talking to it.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde_json::Value;

/// The default model, as `scripts/setup` installs it.
pub fn model_path() -> String {
    if let Ok(p) = std::env::var("SUPERFLUID_MODEL") {
        return p;
    }
    let home = std::env::var("SUPERFLUID_HOME").unwrap_or_else(|_| {
        format!(
            "{}/.cache/superfluid",
            std::env::var("HOME").unwrap_or_default()
        )
    });
    format!("{home}/models/SmolLM2-135M-Instruct.Q4_1.gguf")
}

/// The model id clients name.
pub const MODEL: &str = "SmolLM2-135M-Instruct.Q4_1";

/// The path of `file`, a model `scripts/setup` installs in
/// `$SUPERFLUID_HOME/models` beside the default one.
pub fn installed_model(file: &str) -> String {
    let home = std::env::var("SUPERFLUID_HOME").unwrap_or_else(|_| {
        format!(
            "{}/.cache/superfluid",
            std::env::var("HOME").unwrap_or_default()
        )
    });
    let path = format!("{home}/models/{file}");
    assert!(
        std::path::Path::new(&path).is_file(),
        "{path} is missing: run scripts/setup, which installs it"
    );
    path
}

/// A running `superfluid serve`; killed on drop.
pub struct Server {
    child: Child,
    pub base: String,
    pub client: reqwest::Client,
}

impl Server {
    /// Starts `superfluid serve` on an ephemeral port with `extra` flags and
    /// waits for the line that says where it listens.
    pub fn start(extra: &[&str]) -> Result<Server> {
        let mut child = Command::new(env!("CARGO_BIN_EXE_superfluid"))
            .args([
                "serve",
                "--http",
                "127.0.0.1:0",
                "--threads",
                "1",
                "--model",
            ])
            .arg(model_path())
            .args(extra)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .context("spawning superfluid serve")?;
        let stderr = child.stderr.take().context("no stderr")?;
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut tx = Some(tx);
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                eprintln!("[serve] {line}");
                if let Some(addr) = line.split("http://").nth(1) {
                    if let Some(t) = tx.take() {
                        let addr: String =
                            addr.chars().take_while(|c| !c.is_whitespace()).collect();
                        let _ = t.send(addr);
                    }
                }
            }
        });
        let addr = match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(a) => a,
            Err(_) => {
                let _ = child.kill();
                bail!("superfluid serve did not say where it listens within 60 s");
            }
        };
        Ok(Server {
            child,
            base: format!("http://{addr}"),
            client: reqwest::Client::new(),
        })
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    /// POSTs `body` as JSON; returns status and parsed body.
    pub async fn post(&self, path: &str, body: &Value) -> Result<(u16, Value)> {
        let resp = self.client.post(self.url(path)).json(body).send().await?;
        let status = resp.status().as_u16();
        let text = resp.text().await?;
        let json =
            serde_json::from_str(&text).with_context(|| format!("body is not JSON: {text}"))?;
        Ok((status, json))
    }

    /// POSTs a raw body with a content type; returns status and parsed body.
    pub async fn post_raw(
        &self,
        path: &str,
        content_type: &str,
        body: &str,
    ) -> Result<(u16, Value)> {
        let resp = self
            .client
            .post(self.url(path))
            .header("content-type", content_type)
            .body(body.to_owned())
            .send()
            .await?;
        let status = resp.status().as_u16();
        let text = resp.text().await?;
        let json =
            serde_json::from_str(&text).with_context(|| format!("body is not JSON: {text}"))?;
        Ok((status, json))
    }

    /// POSTs a streaming request; returns the `data:` payloads in order and
    /// the value of the `x-superfluid-node` header.
    pub async fn stream(&self, path: &str, body: &Value) -> Result<(Vec<String>, Option<String>)> {
        let resp = self.client.post(self.url(path)).json(body).send().await?;
        if !resp.status().is_success() {
            bail!("stream answered {}: {}", resp.status(), resp.text().await?);
        }
        let node = resp
            .headers()
            .get("x-superfluid-node")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let text = resp.text().await?;
        let events = text
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .map(|l| l.trim().to_owned())
            .collect();
        Ok((events, node))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A greedy chat request.
pub fn chat(messages: Value, max_tokens: u32) -> Value {
    serde_json::json!({
        "model": MODEL,
        "messages": messages,
        "temperature": 0,
        "max_tokens": max_tokens,
    })
}

/// The OpenAI error message of an error body, or a failure naming the body.
pub fn error_message(body: &Value) -> String {
    body["error"]["message"]
        .as_str()
        .map(str::to_owned)
        .unwrap_or_else(|| panic!("no error.message in {body}"))
}
