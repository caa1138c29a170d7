//! API keys on the client routes: `superfluid keys` against a running head,
//! `--api-key` on `serve`, and refusing an open API on a reachable address.

use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};

use crate::fleet_support::{bin, run_cmd, serial, token, Head, Node, Ran, TempDir};
use crate::stop_support::{assert_exits_cleanly, terminate};
use crate::support::{chat, model_path, Server, MODEL};

/// Runs `superfluid keys ARGS` against `head`.
pub fn keys(head: &Head, args: &[&str]) -> Ran {
    let mut cmd = Command::new(bin());
    cmd.arg("keys")
        .args(args)
        .args(["--url", &head.base(), "--data-dir"])
        .arg(&head.dir);
    run_cmd(
        &format!("keys {}", args.join(" ")),
        cmd,
        Duration::from_secs(60),
    )
    .expect("running superfluid keys")
}

/// `keys create ARGS`: the secret it printed, its only line on stdout.
pub fn create(head: &Head, args: &[&str]) -> String {
    let mut all = vec!["create"];
    all.extend_from_slice(args);
    let ran = keys(head, &all);
    assert!(ran.status.success(), "{}", ran.describe());
    let secret = ran.stdout.trim().to_owned();
    assert!(
        secret.starts_with("sk-sf-") && !secret.contains('\n'),
        "{}",
        ran.describe()
    );
    secret
}

/// `keys list --json`.
pub fn list(head: &Head) -> Vec<Value> {
    let ran = keys(head, &["list", "--json"]);
    assert!(ran.status.success(), "{}", ran.describe());
    assert!(!ran.stdout.contains("sk-sf-"), "a listing shows no secret");
    serde_json::from_str(&ran.stdout).expect("keys list --json prints JSON")
}

pub fn named<'a>(keys: &'a [Value], name: &str) -> &'a Value {
    keys.iter()
        .find(|k| k["name"] == name)
        .unwrap_or_else(|| panic!("no key {name} in {keys:?}"))
}

/// GET `path` with `headers`; status, `WWW-Authenticate`, and body.
async fn get(head: &Head, path: &str, headers: &[(&str, &str)]) -> (u16, Option<String>, Value) {
    let mut request = head.client.get(head.url(path));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.expect("sending a request");
    let status = response.status().as_u16();
    let challenge = response
        .headers()
        .get("www-authenticate")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let text = response.text().await.expect("reading the body");
    let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, challenge, body)
}

fn bearer(secret: &str) -> String {
    format!("Bearer {secret}")
}

fn assert_invalid_key(status: u16, challenge: Option<String>, body: &Value, what: &str) {
    assert_eq!(status, 401, "{what}: {body}");
    assert_eq!(challenge.as_deref(), Some("Bearer"), "{what}");
    assert_eq!(
        body["error"]["type"], "invalid_request_error",
        "{what}: {body}"
    );
    assert_eq!(body["error"]["code"], "invalid_api_key", "{what}: {body}");
    assert!(body["error"]["param"].is_null(), "{what}: {body}");
    assert!(body["error"]["message"].is_string(), "{what}: {body}");
}

#[tokio::test]
async fn client_routes_need_a_key_once_one_exists() {
    let _serial = serial().await;
    let dir = TempDir::new("keys-head");
    let head = Head::start(dir.path(), &[]).expect("starting superfluid head");
    let (open, _, body) = get(&head, "/v1/models", &[]).await;
    assert_eq!(open, 200, "with no key the API is open: {body}");

    let alice = create(&head, &["alice"]);
    let (status, challenge, body) = get(&head, "/v1/models", &[]).await;
    assert_invalid_key(status, challenge, &body, "no key");
    let (status, challenge, body) = get(
        &head,
        "/v1/models",
        &[("authorization", "Bearer sk-sf-wrong")],
    )
    .await;
    assert_invalid_key(status, challenge, &body, "a wrong key");
    let (status, _, body) = get(&head, "/v1/models", &[("authorization", &bearer(&alice))]).await;
    assert_eq!(status, 200, "a Bearer key: {body}");
    assert_eq!(body["data"][0]["id"], MODEL, "{body}");
    let (status, _, body) = get(&head, "/v1/models", &[("x-api-key", &alice)]).await;
    assert_eq!(status, 200, "an x-api-key: {body}");

    let (health, _, body) = get(&head, "/health", &[]).await;
    assert_ne!(health, 401, "/health stays open: {body}");
    let (metrics, _, _) = get(&head, "/metrics", &[]).await;
    assert_eq!(metrics, 200, "/metrics stays open");

    // Another key stays, so the API stays closed (on loopback, revoking
    // the last key opens it again, as before any key existed).
    create(&head, &["other"]);
    let ran = keys(&head, &["revoke", "alice"]);
    assert!(ran.status.success(), "{}", ran.describe());
    let (status, challenge, body) =
        get(&head, "/v1/models", &[("authorization", &bearer(&alice))]).await;
    assert_invalid_key(
        status,
        challenge,
        &body,
        "a revoked key, on the next request",
    );
}

#[tokio::test]
async fn a_key_sees_and_uses_only_its_models() {
    let _serial = serial().await;
    let dir = TempDir::new("keys-models");
    let head = Head::start(dir.path(), &[]).expect("starting superfluid head");
    let bob = create(&head, &["bob", "--models", "some-other-model"]);
    let (status, _, body) = get(&head, "/v1/models", &[("authorization", &bearer(&bob))]).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["data"], json!([]), "bob may list no served model");
    let (status, _, body) = get(
        &head,
        &format!("/v1/models/{MODEL}"),
        &[("authorization", &bearer(&bob))],
    )
    .await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["error"]["code"], "model_not_found", "{body}");

    let response = head
        .client
        .post(head.url("/v1/chat/completions"))
        .bearer_auth(&bob)
        .json(&chat(json!([{"role": "user", "content": "Hi"}]), 4))
        .send()
        .await
        .expect("sending a chat request");
    assert_eq!(response.status().as_u16(), 403);
    let body: Value = response.json().await.expect("a JSON body");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains(MODEL), "the 403 names the model: {body}");
    assert_eq!(body["error"]["code"], "model_not_allowed", "{body}");
}

#[tokio::test]
async fn an_expired_key_is_refused_saying_so() {
    let _serial = serial().await;
    let dir = TempDir::new("keys-expiry");
    let head = Head::start(dir.path(), &[]).expect("starting superfluid head");
    let carol = create(&head, &["carol", "--expires", "1s"]);
    // Expiry is kept in whole seconds: two later, it has passed.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (status, challenge, body) =
        get(&head, "/v1/models", &[("authorization", &bearer(&carol))]).await;
    assert_invalid_key(status, challenge, &body, "an expired key");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("expired"), "{body}");
}

#[tokio::test]
async fn the_key_store_holds_no_secret_and_usage_survives_a_restart() {
    let _serial = serial().await;
    let dir = TempDir::new("keys-restart");
    let mut head = Head::start(dir.path(), &[]).expect("starting superfluid head");
    let dave = create(&head, &["dave", "--expires", "30d"]);
    for _ in 0..3 {
        let (status, _, body) =
            get(&head, "/v1/models", &[("authorization", &bearer(&dave))]).await;
        assert_eq!(status, 200, "{body}");
    }
    assert!(
        list(&head).iter().any(|k| k["name"] == "dave"),
        "dave is listed"
    );
    terminate(&head.proc);
    assert_exits_cleanly(&mut head.proc, Duration::from_secs(20), "the head");

    let hex = &dave["sk-sf-".len()..];
    for entry in std::fs::read_dir(dir.path()).expect("listing the data dir") {
        let path = entry.expect("a data dir entry").path();
        if path.to_string_lossy().contains("keys.db") {
            let bytes = std::fs::read(&path).expect("reading the key store");
            let found = bytes.windows(hex.len()).any(|w| w == hex.as_bytes());
            assert!(!found, "{} holds the secret", path.display());
        }
    }

    let head = Head::start(dir.path(), &[]).expect("restarting superfluid head");
    let (status, _, body) = get(&head, "/v1/models", &[("x-api-key", &dave)]).await;
    assert_eq!(status, 200, "the key still works after a restart: {body}");
    let all = list(&head);
    let dave = named(&all, "dave");
    assert!(
        dave["usage"]["requests"].as_u64() >= Some(3),
        "the usage from before the restart is kept: {dave}"
    );
    assert!(dave["last_used"].is_u64(), "{dave}");
    assert!(dave["expires"].is_u64(), "{dave}");
}

#[tokio::test]
async fn a_keys_generations_show_in_its_usage() {
    let _serial = serial().await;
    let head_dir = TempDir::new("keys-usage");
    let head = Head::start(head_dir.path(), &[]).expect("starting superfluid head");
    let node_dir = TempDir::new("keys-usage-node");
    let join = token(&head, &[]).expect("minting a token");
    let mut node = Node::join(&join, node_dir.path(), "metered", &[]).expect("starting a node");
    node.wait_up(&head, Duration::from_secs(60))
        .expect("the node joins");
    let frank = create(&head, &["frank"]);
    let response = head
        .client
        .post(head.url("/v1/chat/completions"))
        .bearer_auth(&frank)
        .json(&chat(json!([{"role": "user", "content": "Say hi"}]), 4))
        .timeout(Duration::from_secs(120))
        .send()
        .await
        .expect("sending a chat request");
    assert_eq!(response.status().as_u16(), 200);
    let answer: Value = response.json().await.expect("a JSON body");
    let all = list(&head);
    let usage = &named(&all, "frank")["usage"];
    assert_eq!(usage["requests"], 1, "{usage}");
    assert_eq!(
        usage["prompt_tokens"], answer["usage"]["prompt_tokens"],
        "{usage} vs {answer}"
    );
    assert_eq!(
        usage["completion_tokens"], answer["usage"]["completion_tokens"],
        "{usage} vs {answer}"
    );
    assert_eq!(
        usage["cached_tokens"], answer["usage"]["prompt_tokens_details"]["cached_tokens"],
        "{usage} vs {answer}"
    );

    // GET /v1/fleet shows a key only the models it may use.
    let (status, _, fleet) = get(&head, "/v1/fleet", &[("x-api-key", &frank)]).await;
    assert_eq!(status, 200, "{fleet}");
    assert_eq!(fleet["models"], json!([MODEL]), "{fleet}");
    assert_eq!(fleet["recent"][0]["model"], MODEL, "{fleet}");
    assert_eq!(fleet["nodes"][0]["models"], json!([MODEL]), "{fleet}");
    let bob = create(&head, &["bob", "--models", "some-other-model"]);
    let (status, _, fleet) = get(&head, "/v1/fleet", &[("x-api-key", &bob)]).await;
    assert_eq!(status, 200, "{fleet}");
    assert_eq!(fleet["models"], json!([]), "{fleet}");
    assert_eq!(fleet["recent"], json!([]), "{fleet}");
    assert_eq!(fleet["nodes"][0]["models"], json!([]), "{fleet}");
    assert_eq!(fleet["nodes"][0]["name"], "metered", "{fleet}");
}

#[tokio::test]
async fn limits_are_kept_with_the_key_and_a_zero_limit_is_refused() {
    let _serial = serial().await;
    let dir = TempDir::new("keys-limits");
    let head = Head::start(dir.path(), &[]).expect("starting superfluid head");
    create(&head, &["erin", "--rpm", "10", "--tpm", "5000"]);
    let all = list(&head);
    let erin = named(&all, "erin");
    assert_eq!((&erin["rpm"], &erin["tpm"]), (&json!(10), &json!(5000)));
    let table = keys(&head, &["list"]);
    assert!(table.stdout.contains("5000"), "{}", table.describe());

    let ran = keys(&head, &["create", "zed", "--rpm", "0"]);
    assert!(!ran.status.success(), "{}", ran.describe());
    assert!(ran.stderr.contains("at least 1"), "{}", ran.describe());
    assert_eq!(list(&head).len(), 1, "no key was made");
}

/// Starts `superfluid COMMAND --http 0.0.0.0:0 ...` and waits for it to end.
fn reachable(command: &str, dir: &TempDir, extra: &[&str]) -> Ran {
    let mut cmd = Command::new(bin());
    cmd.args([command, "--http", "0.0.0.0:0", "--model", &model_path()]);
    if command == "head" {
        cmd.args(["--link", "127.0.0.1:0", "--no-mdns", "--data-dir"])
            .arg(dir.path());
    }
    cmd.args(extra);
    run_cmd(command, cmd, Duration::from_secs(60)).expect("running superfluid")
}

#[tokio::test]
async fn a_reachable_address_without_a_key_refuses_to_start() {
    let _serial = serial().await;
    for command in ["head", "serve"] {
        let dir = TempDir::new("keys-open");
        let ran = reachable(command, &dir, &[]);
        assert!(!ran.status.success(), "{command}: {}", ran.describe());
        for hint in ["superfluid keys create", "--api-key", "--insecure-no-auth"] {
            assert!(ran.stderr.contains(hint), "{command}: {}", ran.describe());
        }
    }
}

#[tokio::test]
async fn insecure_no_auth_serves_an_open_api_with_a_warning() {
    let _serial = serial().await;
    let dir = TempDir::new("keys-insecure");
    let mut cmd = Command::new(bin());
    cmd.args(["head", "--http", "0.0.0.0:0", "--link", "127.0.0.1:0"])
        .args(["--no-mdns", "--insecure-no-auth", "--model", &model_path()])
        .arg("--data-dir")
        .arg(dir.path());
    let head = Head::spawn(dir.path(), cmd).expect("the head starts with --insecure-no-auth");
    assert!(head.proc.log().contains("open API"), "{}", head.proc.log());
    let url = format!("http://127.0.0.1:{}/v1/models", head.http.port());
    let response = head.client.get(url).send().await.expect("GET /v1/models");
    assert_eq!(response.status().as_u16(), 200);
}

#[tokio::test]
async fn serve_with_an_api_key_answers_only_that_key() {
    let _serial = serial().await;
    let server = Server::start(&["--api-key", "team-secret"]).expect("starting superfluid serve");
    let body = chat(json!([{"role": "user", "content": "Say hi"}]), 4);
    let refused = server
        .client
        .post(server.url("/v1/chat/completions"))
        .json(&body)
        .send()
        .await
        .expect("sending a chat request");
    assert_eq!(refused.status().as_u16(), 401);
    let answered = server
        .client
        .post(server.url("/v1/chat/completions"))
        .bearer_auth("team-secret")
        .json(&body)
        .send()
        .await
        .expect("sending a chat request");
    assert_eq!(answered.status().as_u16(), 200);
    let answer: Value = answered.json().await.expect("a JSON body");
    assert!(
        answer["choices"][0]["message"]["content"].is_string(),
        "{answer}"
    );
}
