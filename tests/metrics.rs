//! `GET /metrics` of `superfluid serve` after real traffic: each request,
//! token and latency counted exactly once, the page valid for `promtool`,
//! and the optional metrics key.

use std::io::Write;
use std::process::{Command, Stdio};

use crate::scrape::{delta, parse, sum, Sample};
use crate::support::{chat, Server, MODEL};
use serde_json::{json, Value};

async fn scrape(server: &Server) -> String {
    let response = server
        .client
        .get(server.url("/metrics"))
        .send()
        .await
        .expect("GET /metrics");
    assert_eq!(response.status().as_u16(), 200);
    response.text().await.expect("the metrics page")
}

/// `promtool check metrics` on `page`; fails naming what promtool said, or
/// that it is missing.
fn promtool_check(page: &str) {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "promtool is missing ({e}); scripts/setup installs it (Debian package prometheus)"
            )
        });
    child
        .stdin
        .take()
        .expect("promtool's stdin")
        .write_all(page.as_bytes())
        .expect("writing the page to promtool");
    let out = child.wait_with_output().expect("promtool ran");
    assert!(
        out.status.success(),
        "promtool check metrics failed:\n{}{}\n{page}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn usage(body: &Value, field: &str) -> f64 {
    body["usage"][field]
        .as_f64()
        .unwrap_or_else(|| panic!("no usage.{field} in {body}"))
}

#[tokio::test]
async fn a_request_its_tokens_and_its_latencies_are_counted_exactly_once() {
    let server = Server::start(&[]).unwrap();
    let path = "/v1/chat/completions";
    let before = parse(&scrape(&server).await);

    let hello = json!([{"role": "user", "content": "Name three colours."}]);
    let (status, body) = server.post(path, &chat(hello.clone(), 12)).await.unwrap();
    assert_eq!(status, 200, "{body}");
    let mut hot = chat(hello, 4);
    hot["temperature"] = json!(7);
    let (status, bad) = server.post(path, &hot).await.unwrap();
    assert_eq!(status, 400, "{bad}");

    let page = scrape(&server).await;
    let after = parse(&page);
    let moved = |name: &str, labels: &[(&str, &str)]| delta(&before, &after, name, labels);
    let requests = "superfluid_http_requests_total";
    let chat_route = ("endpoint", path);
    let model = ("model", MODEL);
    assert_eq!(
        moved(requests, &[chat_route, model, ("code", "200")]),
        1.0,
        "{page}"
    );
    assert_eq!(
        moved(requests, &[chat_route, model, ("code", "400")]),
        1.0,
        "{page}"
    );
    assert_eq!(moved(requests, &[chat_route]), 2.0, "{page}");
    // The first scrape is counted once it is answered, so the second sees it.
    let metrics_route = [("endpoint", "/metrics"), ("code", "200")];
    assert_eq!(sum(&after, requests, &metrics_route), 1.0, "{page}");

    let prompt = usage(&body, "prompt_tokens");
    let completion = usage(&body, "completion_tokens");
    let cached = body["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_f64()
        .unwrap_or(0.0);
    let prompt_tokens = "superfluid_prompt_tokens_total";
    assert_eq!(moved(prompt_tokens, &[model]), prompt, "{page}");
    assert_eq!(moved(prompt_tokens, &[model, ("source", "cached")]), cached);
    assert_eq!(
        moved("superfluid_generated_tokens_total", &[model]),
        completion
    );
    assert_eq!(moved("superfluid_generations_total", &[]), 1.0);
    assert_eq!(moved("superfluid_route_decisions_total", &[]), 1.0);

    let once = [
        "superfluid_time_to_first_token_seconds_count",
        "superfluid_request_duration_seconds_count",
        "superfluid_queue_wait_seconds_count",
    ];
    for name in once {
        assert_eq!(moved(name, &[model]), 1.0, "{name}:\n{page}");
    }
    assert_eq!(
        moved("superfluid_inter_token_latency_seconds_count", &[model]),
        completion - 1.0,
        "one gap between each two of {completion} tokens:\n{page}"
    );
    // A histogram's largest bucket holds every observation.
    assert_eq!(
        sum(
            &after,
            "superfluid_time_to_first_token_seconds_bucket",
            &[model, ("le", "+Inf")]
        ),
        1.0
    );

    assert_eq!(sum(&after, "superfluid_nodes", &[("state", "up")]), 1.0);
    let node: Vec<&Sample> = after
        .iter()
        .filter(|s| s.name == "superfluid_node_info")
        .collect();
    assert_eq!(node.len(), 1, "{page}");
    assert!(
        node[0]
            .labels
            .iter()
            .any(|(k, v)| k == "models" && v == MODEL),
        "{page}"
    );
    // The node described its machine in its hello: at least its cores.
    let hardware = node[0]
        .labels
        .iter()
        .find(|(k, _)| k == "hardware")
        .map(|(_, v)| v.as_str())
        .unwrap_or_default();
    assert!(hardware.contains(" cores"), "hardware={hardware:?}\n{page}");
    assert!(sum(&after, "superfluid_node_slots", &[]) >= 1.0, "{page}");
    assert!(sum(&after, "superfluid_node_kv_cells", &[]) > 0.0, "{page}");

    promtool_check(&page);
}

#[tokio::test]
async fn with_a_metrics_key_a_scrape_needs_it() {
    let server = Server::start(&["--metrics-key", "scrape-me"]).unwrap();
    let url = server.url("/metrics");
    let without = server.client.get(&url).send().await.unwrap();
    assert_eq!(without.status().as_u16(), 401);
    let body: Value = without.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("--metrics-key")),
        "{body}"
    );
    let wrong = server
        .client
        .get(&url)
        .bearer_auth("guess")
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status().as_u16(), 401);
    let with = server
        .client
        .get(&url)
        .bearer_auth("scrape-me")
        .send()
        .await
        .unwrap();
    assert_eq!(with.status().as_u16(), 200);
    let page = with.text().await.unwrap();
    assert!(page.contains("superfluid_nodes{state=\"up\"}"), "{page}");
    // The client API stays as open as it was.
    let models = server.client.get(server.url("/v1/models")).send().await;
    assert_eq!(models.unwrap().status().as_u16(), 200);
}
