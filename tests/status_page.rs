//! The head's status page and `GET /v1/fleet` end to end: a real
//! `superfluid head`, a joined real node, and the page loaded in headless
//! Chromium, which must draw the node from the fleet view it polls.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::fleet_support::{run_cmd, serial, token, Head, Node, TempDir};

/// How long a node may take to load the model and join.
const JOIN: Duration = Duration::from_secs(60);

/// A head started with `extra` flags, and one joined node, `status-node`.
struct Fleet {
    head: Head,
    _node: Node,
    _dirs: [TempDir; 2],
}

fn fleet(tag: &str, extra: &[&str]) -> Fleet {
    let head_dir = TempDir::new(tag);
    let head = Head::start(head_dir.path(), extra).expect("starting superfluid head");
    let tok = token(&head, &[]).expect("minting a token");
    let node_dir = TempDir::new("status-node");
    let mut node =
        Node::join(&tok, node_dir.path(), "status-node", &[]).expect("starting fleet join");
    node.wait_up(&head, JOIN).expect("the node joins");
    Fleet {
        head,
        _node: node,
        _dirs: [head_dir, node_dir],
    }
}

/// The Chromium binary, if one is installed.
fn chromium() -> Option<&'static str> {
    ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|bin| {
            Command::new(bin)
                .arg("--version")
                .output()
                .is_ok_and(|out| out.status.success())
        })
}

/// Headless Chromium on `url`, with `extra` (`--dump-dom` or
/// `--screenshot=PATH`), given five seconds of page time.
fn headless(bin: &str, profile: &Path, url: &str, extra: &str) -> String {
    let mut cmd = Command::new(bin);
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1400,700",
        "--virtual-time-budget=5000",
    ])
    .arg(format!("--user-data-dir={}", profile.display()))
    .arg(extra)
    .arg(url);
    let ran = run_cmd("chromium", cmd, Duration::from_secs(90)).expect("running chromium");
    assert!(ran.status.success(), "chromium failed: {}", ran.describe());
    ran.stdout
}

#[tokio::test]
async fn the_status_page_draws_the_joined_nodes_in_a_browser() {
    let Some(bin) = chromium() else {
        eprintln!("SKIPPED: chromium is not installed (scripts/setup installs it: apt-get install chromium)");
        return;
    };
    let _serial = serial().await;
    let fleet = fleet("status-page", &[]);
    let (status, _, _) = fleet.head.chat("Say hello.", 4).await.expect("a chat");
    assert_eq!(status, 200);

    let profile = TempDir::new("chromium");
    let dom = headless(bin, profile.path(), &fleet.head.url("/"), "--dump-dom");
    assert!(
        dom.contains("status-node"),
        "the page does not show the node `status-node`:\n{dom}"
    );
    assert!(
        dom.contains("/v1/chat/completions"),
        "the page does not show the recent request:\n{dom}"
    );

    let shot = std::env::temp_dir().join("superfluid-status-page.png");
    let _ = std::fs::remove_file(&shot);
    headless(
        bin,
        profile.path(),
        &fleet.head.url("/"),
        &format!("--screenshot={}", shot.display()),
    );
    let size = std::fs::metadata(&shot).map(|m| m.len()).unwrap_or(0);
    assert!(
        size > 0,
        "chromium wrote no screenshot at {}",
        shot.display()
    );
    println!("status page screenshot: {}", shot.display());
}

#[tokio::test]
async fn the_fleet_view_lists_nodes_and_recent_requests_and_probes_get_plain_text() {
    let _serial = serial().await;
    let fleet = fleet("fleet-view", &[]);
    let head = &fleet.head;
    let (status, _, node) = head.chat("Say hello.", 4).await.expect("a chat");
    assert_eq!(status, 200);
    assert_eq!(node.as_deref(), Some("status-node"));

    let view: Value = head
        .client
        .get(head.url("/v1/fleet"))
        .send()
        .await
        .expect("GET /v1/fleet")
        .json()
        .await
        .expect("the fleet view is JSON");
    let nodes = view["nodes"].as_array().expect("nodes");
    assert_eq!(nodes.len(), 1, "{view}");
    assert_eq!(nodes[0]["name"], "status-node");
    assert_eq!(nodes[0]["state"], "up");
    assert_eq!(nodes[0]["slots"], 2, "{view}");
    let recent = &view["recent"][0];
    assert_eq!(recent["endpoint"], "/v1/chat/completions", "{view}");
    assert_eq!(recent["status"], 200, "{view}");
    assert_eq!(recent["node"], "status-node", "{view}");
    assert!(recent["completion_tokens"].as_u64() > Some(0), "{view}");
    assert!(recent["prompt_tokens"].as_u64() > Some(0), "{view}");
    assert!(recent["ttft_ms"].as_f64().is_some(), "{view}");

    // Ollama's clients probe the root before they talk.
    for method in [reqwest::Method::GET, reqwest::Method::HEAD] {
        let answer = head
            .client
            .request(method.clone(), head.url("/"))
            .send()
            .await
            .expect("probing /");
        assert_eq!(answer.status().as_u16(), 200, "{method} /");
        if method == reqwest::Method::GET {
            assert_eq!(
                answer.text().await.expect("a body"),
                "superfluid is running"
            );
        }
    }
}

#[tokio::test]
async fn with_keys_the_fleet_view_needs_one_and_the_page_does_not() {
    let _serial = serial().await;
    let fleet = fleet("fleet-view-keys", &["--api-key", "sk-status-test"]);
    let head = &fleet.head;
    let url = head.url("/v1/fleet");
    let refused = head.client.get(&url).send().await.expect("GET /v1/fleet");
    assert_eq!(refused.status().as_u16(), 401);
    let opened = head
        .client
        .get(&url)
        .bearer_auth("sk-status-test")
        .send()
        .await
        .expect("GET /v1/fleet with a key");
    assert_eq!(opened.status().as_u16(), 200);
    let view = opened.text().await.expect("the fleet view");
    assert!(!view.contains("sk-status-test"), "{view}");
    let page = head
        .client
        .get(head.url("/"))
        .header("accept", "text/html")
        .send()
        .await
        .expect("GET / as a browser");
    assert_eq!(page.status().as_u16(), 200);
    let html = page.text().await.expect("the page");
    assert!(html.contains("sessionStorage"), "{html}");
}
