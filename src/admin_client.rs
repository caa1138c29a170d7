//! The `fleet` admin commands' side of the head's admin API.

use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use crate::cli::AdminFlags;
use crate::engine;

/// Talks to one head's admin API with its admin key.
pub struct AdminClient {
    url: String,
    key: String,
    http: reqwest::Client,
}

/// Reads the admin key a head keeps in its data dir.
pub fn read_admin_key(data_dir: &Path) -> Result<String> {
    let path = data_dir.join("admin.key");
    let key = std::fs::read_to_string(&path).with_context(|| {
        format!(
            "could not read the admin key at {}; run this on the head's machine, pass --data-dir \
             with the head's data dir, or pass --admin-key (SUPERFLUID_ADMIN_KEY)",
            path.display()
        )
    })?;
    Ok(key.trim().to_owned())
}

impl AdminClient {
    /// A client for the head at `url`, with `key` or the key found in `data_dir`.
    pub fn new(url: &str, key: Option<String>, data_dir: &Path) -> Result<AdminClient> {
        let key = match key {
            Some(k) => k,
            None => read_admin_key(data_dir)?,
        };
        Ok(AdminClient {
            url: url.trim_end_matches('/').to_owned(),
            key,
            http: reqwest::Client::builder()
                // Long enough for `models load` to wait out a head's load timeout.
                .timeout(Duration::from_secs(600))
                .build()?,
        })
    }

    /// Calls `path` with `body`; the answer's JSON, or the head's error message.
    pub async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value> {
        let url = format!("{}{path}", self.url);
        let mut request = self.http.request(method, &url).bearer_auth(&self.key);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.with_context(|| {
            format!(
                "could not reach the head at {}; is `superfluid head` running there? pass --url",
                self.url
            )
        })?;
        let status = response.status();
        let text = response.text().await.unwrap_or_default();
        let body: Value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        if !status.is_success() {
            let message = body["error"]["message"]
                .as_str()
                .map(str::to_owned)
                .unwrap_or_else(|| body.to_string());
            bail!("the head answered {status}: {message}");
        }
        Ok(body)
    }

    /// Mints a join token.
    pub async fn mint(
        &self,
        ttl: Duration,
        uses: u32,
        labels: &[(String, String)],
    ) -> Result<String> {
        let labels: serde_json::Map<String, Value> = labels
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect();
        let body = json!({"ttl_secs": ttl.as_secs(), "uses": uses, "labels": labels});
        let answer = self
            .call(reqwest::Method::POST, "/admin/v1/tokens", Some(body))
            .await?;
        answer["token"]
            .as_str()
            .map(str::to_owned)
            .context("the head's answer has no token")
    }

    /// Every node the head knows.
    pub async fn nodes(&self) -> Result<Vec<Value>> {
        let answer = self
            .call(reqwest::Method::GET, "/admin/v1/nodes", None)
            .await?;
        answer
            .as_array()
            .cloned()
            .context("the head's node list is not an array")
    }

    /// Revokes a node (by id or name): its connection closes and it is refused from now on.
    pub async fn revoke(&self, node: &str) -> Result<Value> {
        self.call(
            reqwest::Method::POST,
            &format!("/admin/v1/nodes/{node}/revoke"),
            None,
        )
        .await
    }

    /// Drains a node: no new work goes there; running generations finish.
    pub async fn drain(&self, node: &str) -> Result<Value> {
        self.call(
            reqwest::Method::POST,
            &format!("/admin/v1/nodes/{node}/drain"),
            None,
        )
        .await
    }
}

/// A client for the head named by the command's admin flags, with the
/// admin key from the flag or the head's data dir.
pub fn client(flags: AdminFlags) -> Result<AdminClient> {
    let data_dir = flags
        .data_dir
        .unwrap_or_else(|| engine::home().join("head"));
    AdminClient::new(&flags.url, flags.admin_key, &data_dir)
}

/// A JSON value of an admin reply as table text: strings bare, `-` for null.
pub fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}
