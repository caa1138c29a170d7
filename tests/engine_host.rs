//! Each loaded model's llama.cpp runs in an engine host, a child process
//! of the node (`superfluid engine-host`), so that an abort in llama.cpp
//! ends only the host. These tests kill a real host with SIGKILL, the
//! harshest end it can have, and check what users see: `serve` lives on
//! and answers again, a fleet moves the stream to its other node without
//! losing or repeating text, and a node that dies takes its hosts with it.

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::fleet_failover::{parse_stream, two_real_nodes};
use crate::fleet_support::{node_header, serial, state_of, wait_until, Head, Proc};
use crate::serve_shutdown::start_serve;
use crate::stop_support::read_rest;
use crate::support::MODEL;

/// The fields of `/proc/PID/stat` after the command name: the state
/// (field 3), then the parent pid (field 4), and so on. The command name
/// is in parentheses and may hold spaces, so the split is after its `)`.
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    Some(rest.split_whitespace().map(str::to_owned).collect())
}

/// Whether `pid` has ended: no `/proc` entry, or a zombie that nobody has
/// reaped yet (an orphan's reaping is up to init, not to this test).
fn ended(pid: u32) -> bool {
    stat_fields(pid).is_none_or(|fields| fields.first().is_some_and(|state| state == "Z"))
}

/// The live engine hosts whose parent is `parent`: processes with
/// `engine-host` in their command line. Zombies are left out: a host that
/// was just killed is one until its node reaps it.
fn engine_hosts(parent: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| {
            stat_fields(pid).is_some_and(|fields| {
                fields.first().is_some_and(|state| state != "Z")
                    && fields.get(1).and_then(|p| p.parse::<u32>().ok()) == Some(parent)
            })
        })
        .filter(|&pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|cmd| cmd.split(|&b| b == 0).any(|arg| arg == b"engine-host"))
        })
        .collect()
}

/// The one engine host of process `parent` (which serves one model), once
/// it is up; fails with `proc`'s output if none is within 30 s.
fn the_host(parent: &Proc) -> u32 {
    let mut hosts = Vec::new();
    let found = wait_until(
        || {
            hosts = engine_hosts(parent.id());
            hosts.len() == 1
        },
        Duration::from_secs(30),
    );
    assert!(
        found,
        "process {} should have exactly one engine-host child, has {hosts:?}; its output:\n{}",
        parent.id(),
        parent.log()
    );
    hosts[0]
}

/// Sends SIGKILL to `pid`: what the kernel's OOM killer or an abort does.
fn sigkill(pid: u32) {
    let sent = Command::new("sh")
        .args(["-c", &format!("kill -KILL {pid}")])
        .status()
        .expect("running kill");
    assert!(sent.success(), "kill -KILL {pid} failed");
}

/// A greedy streamed completion long enough to still run when its host
/// is killed after the first words.
fn long_story() -> Value {
    json!({
        "model": MODEL,
        "prompt": "Once upon a time, in a lighthouse by the sea,",
        "max_tokens": 400,
        "temperature": 0,
        "stream": true,
    })
}

/// Sends `body` to `/v1/completions` at `base`.
async fn send(client: &reqwest::Client, base: &str, body: &Value) -> reqwest::Response {
    client
        .post(format!("{base}/v1/completions"))
        .json(body)
        .timeout(Duration::from_secs(180))
        .send()
        .await
        .expect("sending a completion request")
}

/// Reads `response`, an SSE completion stream, until its text holds at
/// least 20 characters (so that the generation is surely running); the
/// raw stream read so far.
async fn read_first_words(response: &mut reqwest::Response) -> String {
    let mut seen = String::new();
    let started = Instant::now();
    while parse_stream(&seen).0.chars().count() < 20 && started.elapsed() < Duration::from_secs(60)
    {
        let Some(chunk) = response.chunk().await.expect("reading the stream") else {
            break;
        };
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(
        parse_stream(&seen).0.chars().count() >= 20,
        "no 20 characters of text within 60 s: {seen}"
    );
    seen
}

/// Reads the rest of `response` into `seen`; fails with `proc`'s output
/// (the process whose host was killed) if the stream has not ended within
/// 60 s, well beyond the few seconds a move or its failure takes.
async fn read_to_end(response: &mut reqwest::Response, seen: &mut String, proc: &Proc) {
    let ended = tokio::time::timeout(Duration::from_secs(60), read_rest(response, seen)).await;
    assert!(
        ended.is_ok(),
        "the stream did not end within 60 s of the host's kill: {seen}\nits node's output:\n{}",
        proc.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_survives_its_engine_host_killed_mid_stream() {
    let _serial = serial().await;
    let (mut serve, base) = start_serve();
    let first_host = the_host(&serve);
    let client = reqwest::Client::new();
    let mut response = send(&client, &base, &long_story()).await;
    assert_eq!(response.status().as_u16(), 200);
    let mut seen = read_first_words(&mut response).await;
    sigkill(first_host);

    // `serve` has one node, so nothing can take the stream over: it ends
    // with an error event that says why (after the head looked for
    // another node for a few seconds), not with a cut connection.
    read_to_end(&mut response, &mut seen, &serve).await;
    let (_, finishes, errors, done) = parse_stream(&seen);
    assert!(
        finishes.is_empty(),
        "the stream cannot have finished: {seen}"
    );
    assert_eq!(errors.len(), 1, "one error event expected: {seen}");
    let message = errors[0]["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("engine host"),
        "the error should name the engine host's end: {message:?}"
    );
    assert!(done, "the error event is followed by [DONE]: {seen}");
    assert!(
        serve.try_wait().is_none(),
        "serve must outlive its engine host:\n{}",
        serve.log()
    );
    serve
        .wait_for_log(
            &format!("the engine host of model {MODEL} ended"),
            Duration::from_secs(10),
        )
        .expect("serve logs the host's end");

    // The host is restarted after a short backoff; requests sent meanwhile
    // wait for it, so the first one may already succeed. Retrying covers
    // only a request that raced the end of the old host.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut last = String::new();
    let answered = loop {
        let mut body = long_story();
        body["stream"] = json!(false);
        body["max_tokens"] = json!(16);
        let left = deadline.saturating_duration_since(Instant::now());
        let sent = client
            .post(format!("{base}/v1/completions"))
            .json(&body)
            .timeout(left.max(Duration::from_secs(1)))
            .send()
            .await;
        match sent {
            Ok(response) => {
                let status = response.status().as_u16();
                let answer: Value = response.json().await.unwrap_or(Value::Null);
                let text = answer["choices"][0]["text"].as_str().unwrap_or_default();
                if status == 200 && !text.is_empty() {
                    break true;
                }
                last = format!("{status}: {answer}");
            }
            Err(e) => last = e.to_string(),
        }
        if Instant::now() >= deadline {
            break false;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(
        answered,
        "no answer within 30 s of the host's end; last: {last}\n{}",
        serve.log()
    );
    let second_host = the_host(&serve);
    assert_ne!(second_host, first_host, "a new host serves the model");
    assert!(ended(first_host), "the killed host {first_host} still runs");

    // The end is counted on the metrics page, by model and reason.
    let metrics = client
        .get(format!("{base}/metrics"))
        .send()
        .await
        .expect("GET /metrics")
        .text()
        .await
        .expect("the metrics page");
    let counted =
        format!("superfluid_engine_host_exits_total{{model=\"{MODEL}\",reason=\"signal\"}} 1");
    assert!(metrics.contains(&counted), "{counted} not in:\n{metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_moves_a_stream_whose_engine_host_died_to_the_other_node() {
    let _serial = serial().await;
    let (_dirs, head, names, mut nodes) = two_real_nodes();
    let body = long_story();
    let expected = uninterrupted(&head, &body).await;

    let mut response = send(&head.client, &head.base(), &body).await;
    assert_eq!(response.status().as_u16(), 200);
    let serving = node_header(&response).expect("the stream names its node");
    let victim = names
        .iter()
        .position(|name| *name == serving)
        .unwrap_or_else(|| panic!("x-superfluid-node {serving:?} is none of {names:?}"));
    let host = the_host(&nodes[victim].proc);
    let mut seen = read_first_words(&mut response).await;
    let before = parse_stream(&seen).0;
    sigkill(host);
    read_to_end(&mut response, &mut seen, &nodes[victim].proc).await;

    // The node fails the generation as stopping, and the head moves it to
    // the other node, which goes on from the tokens the client has: the
    // client sees one whole answer, the very one no kill gives.
    let (text, finishes, errors, done) = parse_stream(&seen);
    assert!(errors.is_empty(), "{errors:?}\n{seen}");
    assert!(done, "{seen}");
    assert_eq!(finishes.len(), 1, "{seen}");
    assert!(
        text.starts_with(&before) && text.len() > before.len(),
        "the text before the kill must be a prefix of the whole: {before:?} / {text:?}"
    );
    assert_eq!(text, expected, "the text differs from an uninterrupted run");

    // The kill hit a running host (not one that had already finished), and
    // it cost neither node its place in the fleet.
    nodes[victim]
        .proc
        .wait_for_log(
            &format!("the engine host of model {MODEL} ended"),
            Duration::from_secs(10),
        )
        .expect("the node logs its host's end");
    for (node, name) in nodes.iter().zip(names) {
        assert_eq!(
            state_of(&head, name).as_deref(),
            Some("up"),
            "node {name} should stay up:\n{}",
            node.proc.log()
        );
    }
    let restarted = the_host(&nodes[victim].proc);
    assert_ne!(restarted, host, "the node restarts its host");
}

/// The text `body` gets, not streamed, with nothing killed.
async fn uninterrupted(head: &Head, body: &Value) -> String {
    let mut body = body.clone();
    body["stream"] = json!(false);
    let response = send(&head.client, &head.base(), &body).await;
    assert_eq!(response.status().as_u16(), 200);
    let answer: Value = response.json().await.expect("a JSON answer");
    answer["choices"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_node_leaves_no_engine_host_running() {
    let _serial = serial().await;
    let (mut serve, _) = start_serve();
    let host = the_host(&serve);
    // SIGKILL gives the node no chance to stop its hosts: the kernel
    // closes the node's end of each host's socket, and the host ends on
    // that alone.
    serve.kill();
    let gone = wait_until(|| ended(host), Duration::from_secs(10));
    assert!(
        gone,
        "engine host {host} still runs 10 s after its node was killed: {:?}",
        stat_fields(host)
    );
}
