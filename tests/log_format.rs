//! `--log-format json`: a head writes one JSON object per log line, and
//! each request ends with one line carrying its span's fields, for log
//! collectors.

use std::time::Duration;

use serde_json::{json, Value};

use crate::fleet_support::{serial, token, wait_until, Head, Node, TempDir};

/// The head's JSON log lines whose message is `message`.
fn lines_saying(head: &Head, message: &str) -> Vec<Value> {
    head.proc
        .log()
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|line| line["fields"]["message"] == message)
        .collect()
}

/// JSON log lines of any process's log.
fn json_lines(log: &str) -> Vec<Value> {
    log.lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .collect()
}

/// A `fleet join` node given `--log-format json --metrics 127.0.0.1:0`
/// logs JSON lines and serves its engine's metrics where it says.
async fn node_logs_json_and_serves_its_metrics(node: &Node) {
    let log = node.proc.log();
    let lines = json_lines(&log);
    let said = |message: &str| {
        lines
            .iter()
            .filter_map(|l| l["fields"]["message"].as_str())
            .find(|m| m.starts_with(message))
            .map(str::to_owned)
    };
    assert!(said("joined the fleet").is_some(), "{log}");
    let announced = said("node metrics at ").unwrap_or_else(|| panic!("no metrics line:\n{log}"));
    let url = announced.trim_start_matches("node metrics at ");
    let page = reqwest::get(url)
        .await
        .unwrap_or_else(|e| panic!("scraping {url}: {e}"))
        .text()
        .await
        .expect("the node's metrics page");
    let slots = format!(
        "superfluid_engine_slots{{model=\"{}\"}} 2",
        crate::support::MODEL
    );
    assert!(page.contains(&slots), "{slots} not in:\n{page}");
}

#[tokio::test]
async fn json_logs_give_one_line_per_request_with_its_fields() {
    let _serial = serial().await;
    let head_dir = TempDir::new("json-logs");
    let head = Head::start(head_dir.path(), &["--log-format", "json"]).expect("starting the head");
    let tok = token(&head, &[]).expect("minting a token");
    let node_dir = TempDir::new("json-node");
    let node_flags = ["--log-format", "json", "--metrics", "127.0.0.1:0"];
    let mut node = Node::join(&tok, node_dir.path(), "json-node", &node_flags).expect("joining");
    node.wait_up(&head, Duration::from_secs(60))
        .expect("the node joins");
    node_logs_json_and_serves_its_metrics(&node).await;

    let (status, _, _) = head.chat("Say hello.", 4).await.expect("a chat");
    assert_eq!(status, 200);
    // One keyed request, then its replay: the replay's line names the node
    // that answered first.
    let keyed = json!({"model": crate::support::MODEL, "max_tokens": 4,
        "messages": [{"role": "user", "content": "Say hi."}]});
    for _ in 0..2 {
        let resp = head
            .client
            .post(head.url("/v1/chat/completions"))
            .header("Idempotency-Key", "log-1")
            .json(&keyed)
            .send()
            .await
            .expect("a keyed chat");
        assert_eq!(resp.status().as_u16(), 200);
    }
    let unknown =
        json!({"model": "no-such-model", "messages": [{"role": "user", "content": "hi"}]});
    assert_eq!(head.post_chat(&unknown).await.status().as_u16(), 404);
    let not_json = head
        .client
        .post(head.url("/v1/chat/completions"))
        .header("x-superfluid-session", "s-42")
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .expect("a bad body");
    assert_eq!(not_json.status().as_u16(), 400);
    let nowhere = head.client.get(head.url("/v1/nowhere")).send().await;
    assert_eq!(nowhere.expect("an unknown path").status().as_u16(), 404);

    let logged = wait_until(
        || {
            lines_saying(&head, "generation done").len() >= 2
                && !lines_saying(&head, "request done").is_empty()
                && lines_saying(&head, "request refused").len() >= 3
        },
        Duration::from_secs(10),
    );
    let log = head.proc.log();
    assert!(logged, "no request lines in the head's log:\n{log}");
    for line in log.lines().filter(|l| l.starts_with('{')) {
        serde_json::from_str::<Value>(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
    }

    let done = lines_saying(&head, "generation done");
    assert_eq!(done.len(), 2, "a chat and the keyed one: {log}");
    let replayed = lines_saying(&head, "request done");
    assert!(
        replayed
            .iter()
            .any(|l| l["span"]["node"] == "json-node" && l["span"]["outcome"] == 200),
        "the replay's line should name the node: {log}"
    );
    let span = &done[0]["span"];
    assert_eq!(span["name"], "request", "{log}");
    assert!(
        span["id"].as_str().is_some_and(|id| !id.is_empty()),
        "{log}"
    );
    assert_eq!(span["endpoint"], "chat", "{log}");
    assert_eq!(span["model"], crate::support::MODEL, "{log}");
    assert_eq!(span["node"], "json-node", "{log}");
    assert!(span["prompt_tokens"].as_u64() > Some(0), "{log}");
    assert!(span["cached_tokens"].as_u64().is_some(), "{log}");
    assert!(span["ttft_ms"].as_f64().is_some(), "{log}");
    assert!(
        matches!(span["outcome"].as_str(), Some("stop" | "length")),
        "{log}"
    );

    assert_eq!(span["session"], "", "{log}");

    let refused = lines_saying(&head, "request refused");
    let by_endpoint = |endpoint: &str| -> Vec<&Value> {
        refused
            .iter()
            .filter(|l| l["span"]["endpoint"] == endpoint)
            .collect()
    };
    let chat = by_endpoint("chat");
    assert_eq!(chat.len(), 1, "{log}");
    assert_eq!(chat[0]["fields"]["status"], 404, "{log}");
    assert_eq!(chat[0]["span"]["outcome"], 404, "{log}");
    // Refused before a handler ran: the layer's line, with the same fields.
    let bad_body = by_endpoint("/v1/chat/completions");
    assert_eq!(bad_body.len(), 1, "{log}");
    assert_eq!(bad_body[0]["fields"]["status"], 400, "{log}");
    assert_eq!(bad_body[0]["span"]["outcome"], 400, "{log}");
    assert_eq!(bad_body[0]["span"]["session"], "s-42", "{log}");
    assert!(
        bad_body[0]["span"]["id"]
            .as_str()
            .is_some_and(|id| !id.is_empty()),
        "{log}"
    );
    let unmatched = by_endpoint("unmatched");
    assert_eq!(unmatched.len(), 1, "{log}");
    assert_eq!(unmatched[0]["span"]["outcome"], 404, "{log}");
}
