//! A seeded answer at temperature 1 and an answer held to a JSON schema,
//! each moved mid-stream when its real-engine node is killed, end with the
//! very text an uninterrupted run gives: the next node draws each token
//! from the seed and the token's position in the answer, and replays the
//! tokens generated so far through the grammar before going on.

use std::time::Duration;

use serde_json::{json, Value};

use crate::fleet_failover::{killed_midway, two_real_nodes};
use crate::fleet_support::{serial, Head, Node};
use crate::support::MODEL;

/// The text `body` gets with no node killed.
async fn uninterrupted(head: &Head, body: &Value) -> String {
    let mut body = body.clone();
    body["stream"] = json!(false);
    let response = head
        .client
        .post(head.url("/v1/completions"))
        .json(&body)
        .timeout(Duration::from_secs(180))
        .send()
        .await
        .expect("asking the head");
    assert_eq!(response.status().as_u16(), 200);
    let answer: Value = response.json().await.expect("a JSON answer");
    answer["choices"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seeded_and_constrained_answers_keep_their_text_across_a_killed_node() {
    let _serial = serial().await;
    let (dirs, head, names, mut nodes) = two_real_nodes();
    let seeded = json!({
        "model": MODEL,
        "prompt": "Once upon a time, in a lighthouse by the sea,",
        "max_tokens": 200,
        "temperature": 1.0,
        "seed": 1234,
        "stream": true,
    });
    // A string this long keeps the answer running until the kill.
    let schema = json!({
        "type": "object",
        "properties": {"story": {"type": "string", "minLength": 300, "maxLength": 400}},
        "required": ["story"],
        "additionalProperties": false,
    });
    let constrained = json!({
        "model": MODEL,
        "prompt": "Tell a story about a lighthouse keeper, as JSON.",
        "max_tokens": 300,
        "temperature": 0.7,
        "seed": 99,
        "stream": true,
        "response_format": {"type": "json_schema", "json_schema": {"name": "story", "schema": schema}},
    });
    for body in [seeded, constrained] {
        let expected = uninterrupted(&head, &body).await;
        let (before, text) = killed_midway(&head, &body, &names, &mut nodes).await;
        assert!(
            !before.is_empty() && before.len() < text.len(),
            "{before:?} / {text:?}"
        );
        assert_eq!(text, expected, "the text differs from an uninterrupted run");
        if body.get("response_format").is_some() {
            let value: Value = serde_json::from_str(&text).expect("the answer is JSON");
            let story = value["story"].as_str().expect("a story");
            assert!((300..=400).contains(&story.chars().count()), "{text}");
        }
        // Bring the killed node back for the next answer.
        for (i, name) in names.iter().enumerate() {
            if nodes[i].proc.try_wait().is_some() {
                nodes[i] = Node::run(dirs[i + 1].path(), name).expect("restarting the node");
                nodes[i]
                    .wait_up(&head, Duration::from_secs(60))
                    .expect("the restarted node joins again");
            }
        }
    }
    let metrics = head.metrics().await;
    assert!(
        metrics.contains("superfluid_failovers_total{cause=\"node_lost\"} 2\n"),
        "{metrics}"
    );
}
