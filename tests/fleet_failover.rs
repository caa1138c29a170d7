//! A node killed mid-answer does not kill the answer: the head moves each
//! of its generations to another node, which goes on from the tokens the
//! client already has. Chaos on fake-engine nodes (whose tokens are a pure
//! function of the sequence, so every answer has one right text), and one
//! kill of a real-engine node.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use crate::fleet_support::{
    bin, join_no_run, node_named, nodes_json, serial, state_of, token, wait_until, Head, Node,
    Proc, TempDir,
};
use crate::support::{model_path, MODEL};

/// Streaming clients at once.
const CLIENTS: usize = 50;

/// Tokens each answer asks for: long enough that answers run while nodes die.
const ANSWER_TOKENS: u32 = 300;

/// Node kills in the chaos run, one node down at a time.
const KILLS: usize = 3;

/// `superfluid node --fake-engine` from the credential in `dir`.
fn fake_node(dir: &Path, name: &str) -> Node {
    let mut cmd = Command::new(bin());
    cmd.args(["node", "--fake-engine", "--data-dir"])
        .arg(dir)
        .arg("--model")
        .arg(model_path())
        .args(["--slots", "4", "--ctx", "1024"]);
    Node {
        proc: Proc::spawn(&format!("fake {name}"), cmd).expect("spawning a fake node"),
        name: name.to_owned(),
    }
}

/// A completion request for client `i`, greedy so that one text is right.
fn request(i: usize, stream: bool) -> Value {
    json!({
        "model": MODEL,
        "prompt": format!("Client {i} asks for a long answer about failover."),
        "max_tokens": ANSWER_TOKENS,
        "temperature": 0,
        "stream": stream,
    })
}

/// The text, finish reasons and errors of an SSE completion stream.
pub fn parse_stream(body: &str) -> (String, Vec<String>, Vec<Value>, bool) {
    let mut text = String::new();
    let mut finishes = Vec::new();
    let mut errors = Vec::new();
    let mut done = false;
    for data in body.lines().filter_map(|l| l.strip_prefix("data: ")) {
        if data == "[DONE]" {
            done = true;
            continue;
        }
        let Ok(event) = serde_json::from_str::<Value>(data) else {
            continue;
        };
        if event.get("error").is_some() {
            errors.push(event);
            continue;
        }
        let choice = &event["choices"][0];
        text.push_str(choice["text"].as_str().unwrap_or_default());
        if let Some(f) = choice["finish_reason"].as_str() {
            finishes.push(f.to_owned());
        }
    }
    (text, finishes, errors, done)
}

/// A small deterministic generator for kill moments, seeded from the clock
/// and printed, so a failing run can be told apart from another.
struct Dice(u64);

impl Dice {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "chaos run of a few minutes; run by name"]
async fn streams_survive_nodes_killed_and_restarted_at_random() {
    let _serial = serial().await;
    let head_dir = TempDir::new("head");
    // Every stream must complete, so the nodes queue all of them (by
    // default a node queues two per slot and the rest would get 429).
    let head =
        Head::start(head_dir.path(), &["--max-queue", "64"]).expect("starting superfluid head");
    let names = ["alpha", "beta", "gamma"];
    let mut dirs = Vec::new();
    let mut nodes = Vec::new();
    for name in names {
        let tok = token(&head, &[]).expect("minting a token");
        let dir = TempDir::new(name);
        let ran = join_no_run(&tok, dir.path(), name).expect("joining");
        assert!(ran.status.success(), "{}", ran.describe());
        let mut node = fake_node(dir.path(), name);
        node.wait_up(&head, Duration::from_secs(60))
            .expect("the fake node joins");
        dirs.push(dir);
        nodes.push(node);
    }

    // What one uninterrupted node gives each client.
    let mut expected = Vec::new();
    for i in 0..CLIENTS {
        let (status, body) = post(&head, &request(i, false)).await;
        assert_eq!(status, 200, "{body}");
        expected.push(
            body["choices"][0]["text"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        );
    }

    let seed = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64)
        | 1;
    eprintln!("chaos seed {seed}");
    let mut dice = Dice(seed);
    let clients: Vec<_> = (0..CLIENTS)
        .map(|i| {
            let call = head
                .client
                .post(head.url("/v1/completions"))
                .json(&request(i, true))
                .timeout(Duration::from_secs(240));
            tokio::spawn(async move {
                let response = call.send().await?;
                let status = response.status().as_u16();
                Ok::<_, reqwest::Error>((status, response.text().await?))
            })
        })
        .collect();

    // Kill a node at a random moment, bring it back, wait until the head
    // routes to it again; again, with another node.
    let mut order: Vec<usize> = (0..names.len()).collect();
    for k in 0..KILLS {
        let pick = dice.below((order.len()) as u64) as usize;
        let victim = order.swap_remove(pick);
        let wait = Duration::from_millis(300 + dice.below(1500));
        tokio::time::sleep(wait).await;
        let name = names[victim];
        eprintln!("chaos: kill {k}: SIGKILL {name} after {wait:?}");
        nodes[victim].proc.kill();
        let gone = wait_until(
            || state_of(&head, name).as_deref() != Some("up"),
            Duration::from_secs(10),
        );
        assert!(gone, "the head still lists killed node {name} as up");
        nodes[victim] = fake_node(dirs[victim].path(), name);
        nodes[victim]
            .wait_up(&head, Duration::from_secs(60))
            .expect("the restarted node joins again");
    }

    for (i, client) in clients.into_iter().enumerate() {
        let (status, body) = client.await.expect("client task").expect("streaming");
        assert_eq!(status, 200, "client {i}: {body}");
        let (text, finishes, errors, done) = parse_stream(&body);
        assert!(errors.is_empty(), "client {i}: {errors:?}");
        assert!(done, "client {i} got no [DONE]: {body}");
        assert_eq!(finishes, ["length"], "client {i}: {body}");
        assert_eq!(
            text, expected[i],
            "client {i}: the text differs from an uninterrupted run"
        );
    }
    let metrics = head.metrics().await;
    eprintln!(
        "{}",
        metrics
            .lines()
            .filter(|l| l.starts_with("superfluid_failover"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(
        !metrics.contains("superfluid_failovers_total{cause=\"node_lost\"} 0\n"),
        "no stream was moved: the kills missed every answer"
    );
}

async fn post(head: &Head, body: &Value) -> (u16, Value) {
    let response = head
        .client
        .post(head.url("/v1/completions"))
        .json(body)
        .timeout(Duration::from_secs(120))
        .send()
        .await
        .expect("asking the head");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// Which of `names` runs a generation now.
pub fn busy_node(head: &Head, names: &[&'static str]) -> Option<usize> {
    let mut busy = None;
    wait_until(
        || {
            busy = nodes_json(head).ok().and_then(|listed| {
                names.iter().position(|name| {
                    node_named(&listed, name).is_some_and(|n| n["in_flight"].as_u64() == Some(1))
                })
            });
            busy.is_some()
        },
        Duration::from_secs(20),
    );
    busy
}

/// A head and two real-engine nodes, `first` and `second`, both up; the
/// data dirs (the head's, then each node's) live as long as the returned
/// value.
pub fn two_real_nodes() -> (Vec<TempDir>, Head, [&'static str; 2], Vec<Node>) {
    let head_dir = TempDir::new("head");
    let head = Head::start(head_dir.path(), &[]).expect("starting superfluid head");
    let names = ["first", "second"];
    let mut dirs = vec![head_dir];
    let mut nodes = Vec::new();
    for name in names {
        let tok = token(&head, &[]).expect("minting a token");
        let dir = TempDir::new(name);
        let mut node = Node::join(&tok, dir.path(), name, &[]).expect("starting the node");
        node.wait_up(&head, Duration::from_secs(60))
            .expect("the node joins");
        dirs.push(dir);
        nodes.push(node);
    }
    (dirs, head, names, nodes)
}

/// The answer `body` gets, streamed, when the node giving it is killed
/// after its first 20 characters: the text before the kill, and the whole.
pub(crate) async fn killed_midway(
    head: &Head,
    body: &Value,
    names: &[&'static str],
    nodes: &mut [Node],
) -> (String, String) {
    let mut response = head
        .client
        .post(head.url("/v1/completions"))
        .json(body)
        .timeout(Duration::from_secs(180))
        .send()
        .await
        .expect("asking the head");
    assert_eq!(response.status().as_u16(), 200);
    let mut seen = String::new();
    let started = Instant::now();
    while parse_stream(&seen).0.chars().count() < 20 && started.elapsed() < Duration::from_secs(60)
    {
        let Some(chunk) = response.chunk().await.expect("reading the stream") else {
            break;
        };
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    let before = parse_stream(&seen).0;
    let victim = busy_node(head, names).expect("a node runs the generation");
    nodes[victim].proc.kill();
    let mut all = seen;
    while let Some(chunk) = response.chunk().await.expect("reading the stream") {
        all.push_str(&String::from_utf8_lossy(&chunk));
    }
    let (text, finishes, errors, done) = parse_stream(&all);
    assert!(errors.is_empty(), "{errors:?}\n{all}");
    assert!(done, "{all}");
    assert_eq!(finishes.len(), 1, "{all}");
    (before, text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_node_killed_mid_answer_leaves_the_stream_to_finish_on_another() {
    let _serial = serial().await;
    let (_dirs, head, names, mut nodes) = two_real_nodes();
    let body = json!({
        "model": MODEL,
        "prompt": "Once upon a time, in a lighthouse by the sea,",
        "max_tokens": 400,
        "temperature": 0,
        "stream": true,
    });
    // Read until some text has come, then kill the node answering.
    let (before, text) = killed_midway(&head, &body, &names, &mut nodes).await;
    assert!(!before.is_empty(), "no text within 60 s before the kill");
    assert!(
        text.starts_with(&before) && text.len() > before.len(),
        "the text before the kill must be a prefix of the whole: {before:?} / {text:?}"
    );
    let metrics = head.metrics().await;
    assert!(
        metrics.contains("superfluid_failovers_total{cause=\"node_lost\"} 1\n")
            || metrics.contains("superfluid_generations_retried_total 1\n"),
        "{metrics}"
    );
}
