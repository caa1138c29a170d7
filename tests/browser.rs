//! Browsers against the real binary: the `Host` check that stops DNS
//! rebinding on a loopback head, and CORS only for the origins given.

use std::process::Command;
use std::time::Duration;

use reqwest::Response;
use serde_json::Value;

use crate::fleet_support::{bin, run_cmd, serial, TempDir};
use crate::support::{model_path, Server};

/// The port the server listens on, for `Host` headers that name it.
fn port(server: &Server) -> String {
    server
        .base
        .rsplit(':')
        .next()
        .expect("a base URL with a port")
        .to_owned()
}

/// GET `/v1/models` addressed to `host` (the connection still goes to
/// loopback, as a rebound name's would).
async fn models_as(server: &Server, host: &str) -> (u16, Value) {
    let response = server
        .client
        .get(server.url("/v1/models"))
        .header("host", host)
        .send()
        .await
        .expect("sending a request");
    let status = response.status().as_u16();
    let text = response.text().await.expect("reading the body");
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

#[tokio::test]
async fn a_rebound_host_is_refused_and_loopback_names_and_allowed_hosts_answered() {
    let _serial = serial().await;
    let server =
        Server::start(&["--allowed-host", "chat.example.lan"]).expect("starting superfluid serve");
    let port = port(&server);

    let (status, body) = models_as(&server, &format!("evil.example:{port}")).await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["error"]["code"], "host_not_allowed", "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    for hint in ["evil.example", "127.0.0.1", "--allowed-host"] {
        assert!(message.contains(hint), "{hint} in {message}");
    }
    let health = server
        .client
        .get(server.url("/health"))
        .header("host", "evil.example")
        .send()
        .await
        .expect("GET /health");
    assert_eq!(health.status().as_u16(), 403, "/health is checked too");

    for host in [
        format!("localhost:{port}"),
        format!("LOCALHOST:{port}"),
        format!("127.0.0.1:{port}"),
        format!("chat.example.lan:{port}"),
    ] {
        let (status, body) = models_as(&server, &host).await;
        assert_eq!(status, 200, "{host}: {body}");
    }
}

async fn preflight(server: &Server, origin: &str) -> Response {
    server
        .client
        .request(reqwest::Method::OPTIONS, server.url("/v1/chat/completions"))
        .header("origin", origin)
        .header("access-control-request-method", "POST")
        .header(
            "access-control-request-headers",
            "authorization,content-type",
        )
        .send()
        .await
        .expect("sending a preflight")
}

fn allowed_origin(response: &Response) -> Option<&str> {
    response
        .headers()
        .get("access-control-allow-origin")
        .and_then(|v| v.to_str().ok())
}

#[tokio::test]
async fn without_cors_origin_no_page_is_allowed_and_an_unlisted_name_is_refused() {
    let _serial = serial().await;
    let server = Server::start(&[]).expect("starting superfluid serve");
    let response = preflight(&server, "http://localhost:3000").await;
    assert_eq!(allowed_origin(&response), None, "{response:?}");
    let (status, body) = models_as(&server, &format!("chat.example.lan:{}", port(&server))).await;
    assert_eq!(
        status, 403,
        "a name is refused until --allowed-host admits it: {body}"
    );
}

#[tokio::test]
async fn cors_origin_is_echoed_to_that_origin_only_and_its_preflight_needs_no_key() {
    let _serial = serial().await;
    let app = "http://localhost:3000";
    let server = Server::start(&["--cors-origin", app, "--api-key", "team-secret"])
        .expect("starting superfluid serve");
    let response = preflight(&server, app).await;
    assert_eq!(response.status().as_u16(), 200, "{response:?}");
    assert_eq!(allowed_origin(&response), Some(app), "{response:?}");

    let other = preflight(&server, "http://evil.example").await;
    assert_eq!(allowed_origin(&other), None, "{other:?}");

    let listed = server
        .client
        .get(server.url("/v1/models"))
        .header("origin", app)
        .bearer_auth("team-secret")
        .send()
        .await
        .expect("GET /v1/models");
    assert_eq!(listed.status().as_u16(), 200);
    assert_eq!(allowed_origin(&listed), Some(app), "{listed:?}");
}

#[tokio::test]
async fn any_cors_origin_without_keys_refuses_to_start() {
    let _serial = serial().await;
    for command in ["serve", "head"] {
        let dir = TempDir::new("browser-any-origin");
        let mut cmd = Command::new(bin());
        cmd.args([command, "--cors-origin", "*", "--model", &model_path()]);
        if command == "head" {
            cmd.args(["--link", "127.0.0.1:0", "--no-mdns", "--data-dir"])
                .arg(dir.path());
        }
        let ran = run_cmd(command, cmd, Duration::from_secs(60)).expect("running superfluid");
        assert!(!ran.status.success(), "{command}: {}", ran.describe());
        for hint in ["--cors-origin '*'", "--api-key", "http://localhost:3000"] {
            assert!(
                ran.stderr.contains(hint),
                "{command}: {hint}: {}",
                ran.describe()
            );
        }
    }
}
