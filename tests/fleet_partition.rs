//! A node cut off mid-answer: the veth of its network namespace is set
//! down, so its packets are dropped and nothing is closed, as when a cable
//! is pulled or a switch dies. The head notices by Link F's idle timeout
//! (within 3 s of the cut) and the stream finishes on another node with the text one uninterrupted
//! node gives. Skipped, with a note, where namespaces cannot be made.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::fleet_failover::parse_stream;
use crate::fleet_support::{bin, run_cmd, serial, wait_until, Head, Proc, TempDir};
use crate::netns::{NetnsPair, VETH_B};
use crate::support::{model_path, MODEL};

/// Tokens the answer asks for: at the fake engine's 165 a second, about
/// 12 s, long enough to join a second node and cut the first mid-answer.
const ANSWER_TOKENS: u32 = 2000;

/// How soon the head must drop a node that went silent: Link F gives up a
/// silent peer 2.5 s after its last packet at most
/// (`superfluid_link::endpoint::SILENT_PEER_DROPPED_WITHIN`); the rest is the time to
/// see it in `fleet nodes`, asked every 50 ms or so.
const DROPPED_WITHIN: Duration = Duration::from_secs(3);

/// `superfluid ARGS` run in namespace `ns` to its end; its stdout.
pub(crate) fn run_in(pair: &NetnsPair, ns: &str, args: &[&str], dir: &Path) -> String {
    let mut cmd = pair.command(ns, bin());
    cmd.args(args).arg("--data-dir").arg(dir);
    let ran = run_cmd(&args.join(" "), cmd, Duration::from_secs(60)).expect("running superfluid");
    assert!(ran.status.success(), "{}", ran.describe());
    ran.stdout
}

/// Joins a fake-engine node named `name` in namespace `ns` and starts it.
fn fake_node_in(pair: &NetnsPair, ns: &str, token: &str, dir: &Path, name: &str) -> Proc {
    let model = model_path();
    run_in(
        pair,
        ns,
        &[
            "fleet",
            "join",
            token,
            "--no-run",
            "--no-mdns",
            "--name",
            name,
            "--model",
            &model,
        ],
        dir,
    );
    let mut cmd = pair.command(ns, bin());
    cmd.args(["node", "--fake-engine", "--data-dir"])
        .arg(dir)
        .args(["--model", &model, "--slots", "2", "--ctx", "4096"]);
    Proc::spawn(&format!("fake {name}"), cmd).expect("spawning a fake node")
}

/// The state of node `name` in `fleet nodes --json`, asked from inside A.
fn state_in(pair: &NetnsPair, head: &Head, name: &str) -> Option<String> {
    let out = run_in(
        pair,
        &pair.a,
        &["fleet", "nodes", "--json", "--url", &head.base()],
        &head.dir,
    );
    let nodes: Vec<Value> = serde_json::from_str(out.trim()).ok()?;
    let node = nodes.iter().find(|n| n["name"] == name)?;
    node["state"].as_str().map(str::to_owned)
}

/// A head in namespace A serving `model`, its Link F on A's veth address
/// (reachable from B over the pair), its HTTP on A's loopback.
pub(crate) fn head_in_a(pair: &NetnsPair, dir: &Path, model: &Path) -> anyhow::Result<Head> {
    let link = format!("{}:0", pair.addr_a);
    let mut cmd = pair.command(&pair.a, bin());
    cmd.args([
        "head",
        "--http",
        "127.0.0.1:0",
        "--link",
        &link,
        "--no-mdns",
    ])
    .arg("--data-dir")
    .arg(dir)
    .arg("--model")
    .arg(model);
    Head::spawn(dir, cmd)
}

/// `curl` run in namespace A against the head: streams its output.
pub(crate) fn curl_in_a(
    pair: &NetnsPair,
    head: &Head,
    path: &str,
    body: Option<&Value>,
) -> Command {
    let mut cmd = pair.command(&pair.a, "curl");
    cmd.args(["-sN", "--max-time", "120"]).arg(head.url(path));
    if let Some(body) = body {
        cmd.args(["-H", "content-type: application/json", "-d"])
            .arg(body.to_string());
    }
    cmd
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_on_a_partitioned_node_finishes_on_another() {
    let _serial = serial().await;
    let Some(pair) = NetnsPair::create("cut").expect("creating the namespaces") else {
        eprintln!("SKIPPED a_stream_on_a_partitioned_node_finishes_on_another: no network namespaces here");
        return;
    };
    let (head_dir, far_dir, near_dir) = (
        TempDir::new("cut-head"),
        TempDir::new("cut-far"),
        TempDir::new("cut-near"),
    );
    let model = model_path();
    let head = head_in_a(&pair, head_dir.path(), Path::new(&model))
        .expect("starting the head in namespace A");
    let mint = |pair: &NetnsPair| {
        let url = head.base();
        run_in(pair, &pair.a, &["fleet", "token", "--url", &url], &head.dir)
            .trim()
            .to_owned()
    };

    // Only the far node (in B) is there when the answer starts.
    let _far = fake_node_in(&pair, &pair.b, &mint(&pair), far_dir.path(), "far");
    assert!(
        wait_until(
            || state_in(&pair, &head, "far").as_deref() == Some("up"),
            Duration::from_secs(60)
        ),
        "the node in B did not come up"
    );
    let body = json!({
        "model": MODEL,
        "prompt": "A long answer about what happens when a cable is pulled.",
        "max_tokens": ANSWER_TOKENS,
        "temperature": 0,
        "stream": true,
    });
    let mut stream = Proc::spawn(
        "stream",
        curl_in_a(&pair, &head, "/v1/completions", Some(&body)),
    )
    .expect("starting curl in A");
    stream
        .wait_for_log("\"text\"", Duration::from_secs(60))
        .expect("the stream starts on the far node");

    // A second node, in A, then the far one's cable pulled.
    let _near = fake_node_in(&pair, &pair.a, &mint(&pair), near_dir.path(), "near");
    assert!(
        wait_until(
            || state_in(&pair, &head, "near").as_deref() == Some("up"),
            Duration::from_secs(60)
        ),
        "the node in A did not come up"
    );
    let before = parse_stream(&stream.log()).0;
    assert!(
        stream.try_wait().is_none(),
        "the answer ended before the cut; make it longer: {before:?}"
    );
    let cut = Instant::now();
    let ran = Command::new("ip")
        .args(["-n", &pair.b, "link", "set", "dev", VETH_B, "down"])
        .output()
        .expect("running ip");
    assert!(ran.status.success(), "{ran:?}");
    let dropped = wait_until(
        || state_in(&pair, &head, "far").as_deref() != Some("up"),
        DROPPED_WITHIN,
    );
    let took = cut.elapsed();
    eprintln!(
        "partition: the head dropped the far node {:.2} s after the cut",
        took.as_secs_f64()
    );
    assert!(dropped, "the far node is still up {took:?} after the cut");

    assert!(
        wait_until(|| stream.try_wait().is_some(), Duration::from_secs(120)),
        "the stream did not end"
    );
    // Let the reader threads catch up with curl's last lines.
    std::thread::sleep(Duration::from_millis(300));
    let all = stream.log();
    let (text, finishes, errors, done) = parse_stream(&all);
    assert!(errors.is_empty(), "{errors:?}\n{all}");
    assert!(done, "no [DONE]: {all}");
    assert_eq!(finishes, ["length"], "{all}");
    assert!(text.starts_with(&before) && text.len() > before.len());

    // The same request, whole, on the near node alone: the same text, as
    // if no cable had been pulled.
    let mut whole = body.clone();
    whole["stream"] = json!(false);
    let ran = run_cmd(
        "whole answer",
        curl_in_a(&pair, &head, "/v1/completions", Some(&whole)),
        Duration::from_secs(120),
    )
    .expect("running curl in A");
    let answer: Value = serde_json::from_str(&ran.stdout).expect("a JSON answer");
    assert_eq!(
        answer["choices"][0]["text"].as_str(),
        Some(text.as_str()),
        "the moved answer differs from an uninterrupted one"
    );
    let ran = run_cmd(
        "metrics",
        curl_in_a(&pair, &head, "/metrics", None),
        Duration::from_secs(30),
    )
    .expect("running curl in A");
    assert!(
        ran.stdout
            .contains("superfluid_failovers_total{cause=\"node_lost\"} 1\n"),
        "{}",
        ran.stdout
    );
}
