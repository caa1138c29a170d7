//! Warm-prefix routing end to end: a `superfluid head` and two real nodes
//! with the real model. A conversation's next turn goes to the node that
//! holds its prefix, and the head says so in the response, its metrics and
//! `fleet nodes --json`.

use std::time::Duration;

use serde_json::{json, Value};

use crate::fleet_support::{
    node_header, nodes_json, serial, token, wait_until, Head, Node, TempDir,
};

/// How long a node may take to load the model and join.
const JOIN: Duration = Duration::from_secs(60);

struct Fleet {
    head: Head,
    _dirs: Vec<TempDir>,
    _nodes: Vec<Node>,
}

/// A head started with `extra` flags and two joined nodes, alpha and beta.
fn fleet(tag: &str, extra: &[&str]) -> Fleet {
    let head_dir = TempDir::new(tag);
    let head = Head::start(head_dir.path(), extra).expect("starting superfluid head");
    let mut dirs = vec![head_dir];
    let mut nodes = Vec::new();
    for name in ["alpha", "beta"] {
        let tok = token(&head, &[]).expect("minting a token");
        let dir = TempDir::new(name);
        let mut node = Node::join(&tok, dir.path(), name, &[]).expect("starting fleet join");
        node.wait_up(&head, JOIN).expect("the node joins");
        dirs.push(dir);
        nodes.push(node);
    }
    Fleet {
        head,
        _dirs: dirs,
        _nodes: nodes,
    }
}

/// A system prompt of a few hundred tokens, different for each `topic`.
fn system_prompt(topic: &str) -> String {
    let mut text = format!("You are a helpful assistant who knows a great deal about {topic}. ");
    for i in 0..12 {
        text.push_str(&format!(
            "Rule {i}: answer questions about {topic} briefly, plainly and politely, \
             and never invent facts about {topic}. "
        ));
    }
    text
}

/// One greedy turn: the answer's text, the serving node, and the usage's
/// cached prompt tokens.
async fn turn(head: &Head, messages: &[Value]) -> (String, String, u64) {
    let body = json!({"model": crate::support::MODEL, "messages": messages, "max_tokens": 12, "temperature": 0});
    let resp = head.post_chat(&body).await;
    assert_eq!(resp.status().as_u16(), 200, "chat failed");
    let node = node_header(&resp).expect("every answer names its node in x-superfluid-node");
    let answer: Value = resp.json().await.expect("a JSON answer");
    let text = answer["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let cached = answer["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .expect("usage.prompt_tokens_details.cached_tokens");
    (text, node, cached)
}

/// The value of one sample line of the metrics page.
fn sample(page: &str, series: &str) -> f64 {
    page.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no sample {series} on the metrics page:\n{page}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_next_turn_goes_to_the_node_holding_its_conversation() {
    let _serial = serial().await;
    let fleet = fleet("route-head", &[]);
    let head = &fleet.head;
    let topics = ["rivers", "volcanoes", "bridges"];
    let mut conversations: Vec<Vec<Value>> = topics
        .iter()
        .map(|t| vec![json!({"role": "system", "content": system_prompt(t)})])
        .collect();
    let mut first_nodes = Vec::new();
    for (conv, topic) in conversations.iter_mut().zip(topics) {
        conv.push(
            json!({"role": "user", "content": format!("Name one famous example of {topic}.")}),
        );
        let (text, node, _) = turn(head, conv).await;
        conv.push(json!({"role": "assistant", "content": text}));
        first_nodes.push(node);
    }
    assert!(
        first_nodes.iter().any(|n| n == "alpha") && first_nodes.iter().any(|n| n == "beta"),
        "three new conversations on two idle nodes should use both: {first_nodes:?}"
    );
    // Three interleaved conversations: with two nodes, a policy blind to
    // caches sends at least one next turn to the node without its prefix.
    for (round, question) in ["Tell me more.", "Why is that?"].into_iter().enumerate() {
        for (i, conv) in conversations.iter_mut().enumerate() {
            conv.push(json!({"role": "user", "content": question}));
            let (text, node, cached) = turn(head, conv).await;
            assert_eq!(
                node,
                first_nodes[i],
                "turn {} of conversation {i} should go to the node that holds it",
                round + 2
            );
            assert!(
                cached >= 200,
                "turn {} of conversation {i} should find its system prompt and history cached; cached_tokens = {cached}",
                round + 2
            );
            conv.push(json!({"role": "assistant", "content": text}));
        }
    }

    let page = head.metrics().await;
    let warm = sample(
        &page,
        "superfluid_route_decisions_total{policy=\"least-ttft\",reason=\"warm\"}",
    );
    assert!(warm >= 6.0, "six warm decisions should be counted:\n{page}");
    let samples = crate::scrape::parse(&page);
    let prompt_tokens = "superfluid_prompt_tokens_total";
    let cached = crate::scrape::sum(&samples, prompt_tokens, &[("source", "cached")]);
    let prompt = crate::scrape::sum(&samples, prompt_tokens, &[]);
    assert!(
        cached > 0.0 && cached < prompt,
        "cached prompt tokens ({cached}) should be counted, and be part of all prompt tokens ({prompt})"
    );

    // Load reports reach `fleet nodes --json` within a fraction of a second.
    let measured = wait_until(
        || {
            nodes_json(head).is_ok_and(|nodes| {
                nodes.iter().all(|n| {
                    n["prefill_tokens_per_sec"]
                        .as_f64()
                        .is_some_and(|r| r > 0.0)
                        && n["decode_tokens_per_sec"].as_f64().is_some_and(|r| r > 0.0)
                        && n["idle_slots"] == 2
                        && n["busy_slots"] == 0
                        && n["cached_blocks"].as_u64().is_some_and(|b| b > 0)
                })
            })
        },
        Duration::from_secs(5),
    );
    assert!(
        measured,
        "each node should list measured rates, 2 idle slots and its cached blocks: {:?}",
        nodes_json(head).map(Value::from)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_robin_policy_takes_turns_whatever_the_cache() {
    let _serial = serial().await;
    let fleet = fleet("rr-head", &["--route-policy", "round-robin"]);
    let head = &fleet.head;
    let mut conv = vec![json!({"role": "system", "content": system_prompt("lighthouses")})];
    let mut served = Vec::new();
    for question in ["Name a lighthouse.", "Tell me more.", "Why?", "Where?"] {
        conv.push(json!({"role": "user", "content": question}));
        let (text, node, _) = turn(head, &conv).await;
        conv.push(json!({"role": "assistant", "content": text}));
        served.push(node);
    }
    for pair in served.windows(2) {
        assert_ne!(
            pair[0], pair[1],
            "round-robin should alternate between the two nodes: {served:?}"
        );
    }
    let page = head.metrics().await;
    let rr = sample(
        &page,
        "superfluid_route_decisions_total{policy=\"round-robin\",reason=\"round_robin\"}",
    );
    assert_eq!(rr, 4.0, "four round-robin decisions:\n{page}");
}
