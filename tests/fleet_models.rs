//! Several models across a fleet: a head serving two real, different models
//! (SmolLM2 and Gemma 3 270M), two nodes each started with one of them;
//! requests for each are served, an idle model is unloaded after
//! `--unload-after`, and a request for an unloaded model loads it again.
//! `superfluid models`, and Ollama's `keep_alive`, show and override where
//! each is loaded.

use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use serde_json::{json, Value};

use crate::fleet_support::{
    bin, run_cmd, serial, token, wait_until, Head, Node, Proc, Ran, TempDir, LIGHT,
};
use crate::support::{model_path, MODEL};

/// The second model's id and file, which `scripts/setup` installs.
const SECOND: &str = "gemma-3-270m-q4_k_m";

fn second_model_path() -> String {
    crate::support::installed_model(&format!("{SECOND}.gguf"))
}

/// `superfluid fleet join TOKEN ... --model FILE`: a node serving `file`,
/// whose model cache (`$SUPERFLUID_HOME/models`) is `dir`'s, empty.
fn join_with(tok: &str, dir: &TempDir, name: &str, file: &str) -> Result<Node> {
    let mut cmd = Command::new(bin());
    cmd.args(["fleet", "join", tok, "--no-mdns", "--data-dir"])
        .arg(dir.path())
        .args(["--name", name, "--model", file])
        .args(["--metrics", "127.0.0.1:0"])
        .args(LIGHT)
        .env("SUPERFLUID_HOME", dir.path());
    Ok(Node {
        proc: Proc::spawn(&format!("join {name}"), cmd)?,
        name: name.to_owned(),
    })
}

/// The node's own metrics page (`--metrics`), from the address it logged.
async fn node_metrics(node: &Node) -> Result<String> {
    let log = node.proc.log();
    let url = log
        .split("node metrics at ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .with_context(|| format!("{} logged no metrics address: {log}", node.name))?;
    Ok(reqwest::get(url).await?.text().await?)
}

/// `superfluid models ARGS` against `head`.
fn models_cli(head: &Head, args: &[&str]) -> Result<Ran> {
    let mut cmd = Command::new(bin());
    cmd.arg("models")
        .args(args)
        .args(["--url", &head.base(), "--data-dir"])
        .arg(&head.dir);
    run_cmd(
        &format!("models {}", args.join(" ")),
        cmd,
        Duration::from_secs(180),
    )
}

/// A greedy request for `model`: a chat for the default model, a raw
/// completion for the second (a base model whose GGUF has no chat
/// template). Status, body, serving node.
async fn generate(head: &Head, model: &str) -> Result<(u16, Value, Option<String>)> {
    let (path, body) = if model == MODEL {
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "Name a colour."}]}),
        )
    } else {
        (
            "/v1/completions",
            json!({"prompt": "The colours of the rainbow are"}),
        )
    };
    let mut body = body;
    body["model"] = json!(model);
    body["temperature"] = json!(0);
    body["max_tokens"] = json!(8);
    let resp = head
        .client
        .post(head.url(path))
        .json(&body)
        .timeout(Duration::from_secs(180))
        .send()
        .await?;
    let status = resp.status().as_u16();
    let node = crate::fleet_support::node_header(&resp);
    let text = resp.text().await?;
    Ok((
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
        node,
    ))
}

/// The `loaded_on` extension of `model` in `GET /v1/models`.
async fn loaded_on(head: &Head, model: &str) -> Result<Vec<String>> {
    let list: Value = head
        .client
        .get(head.url("/v1/models"))
        .send()
        .await?
        .json()
        .await?;
    let card = list["data"]
        .as_array()
        .and_then(|d| d.iter().find(|m| m["id"] == model))
        .with_context(|| format!("/v1/models does not list {model}: {list}"))?;
    Ok(card["loaded_on"]
        .as_array()
        .context("a model card without loaded_on")?
        .iter()
        .filter_map(|n| n.as_str().map(str::to_owned))
        .collect())
}

/// Polls `/v1/models` until `check` holds for `model`'s nodes.
async fn wait_loaded(
    head: &Head,
    model: &str,
    timeout: Duration,
    check: impl Fn(&[String]) -> bool,
) -> Result<Vec<String>> {
    let deadline = Instant::now() + timeout;
    loop {
        let nodes = loaded_on(head, model).await?;
        if check(&nodes) {
            return Ok(nodes);
        }
        ensure!(
            Instant::now() < deadline,
            "{model} is loaded on {nodes:?} after {timeout:?}; the head's output:\n{}",
            head.proc.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_models_load_where_asked_and_unload_when_idle() -> Result<()> {
    let _serial = serial().await;
    let second = second_model_path();
    let dir = TempDir::new("models-head");
    let head = Head::start(
        dir.path(),
        &[
            "--model",
            &second,
            "--unload-after",
            "8",
            "--load-timeout",
            "150",
        ],
    )?;
    let tok = token(&head, &["--uses", "2"])?;
    let (dir_a, dir_b) = (TempDir::new("models-a"), TempDir::new("models-b"));
    let mut a = join_with(&tok, &dir_a, "smol-node", &model_path())?;
    let mut b = join_with(&tok, &dir_b, "gemma-node", &second)?;
    a.wait_up(&head, Duration::from_secs(120))?;
    b.wait_up(&head, Duration::from_secs(120))?;

    // Each model is served by the node that has it loaded.
    let (status, body, node) = generate(&head, MODEL).await?;
    ensure!(status == 200, "chat with {MODEL}: {status} {body}");
    ensure!(
        node.as_deref() == Some("smol-node"),
        "{MODEL} served by {node:?}"
    );
    let (status, body, node) = generate(&head, SECOND).await?;
    ensure!(status == 200, "chat with {SECOND}: {status} {body}");
    ensure!(
        node.as_deref() == Some("gemma-node"),
        "{SECOND} served by {node:?}"
    );
    ensure!(
        body["choices"][0]["text"]
            .as_str()
            .is_some_and(|t| !t.is_empty()),
        "no text from {SECOND}: {body}"
    );
    ensure!(loaded_on(&head, SECOND).await? == ["gemma-node"]);

    // Idle past --unload-after: unloaded, and listed nowhere.
    wait_loaded(&head, SECOND, Duration::from_secs(40), <[String]>::is_empty).await?;
    ensure!(
        wait_until(
            || b.proc.log().contains("the head unloaded a model"),
            Duration::from_secs(10)
        ),
        "the node should say it unloaded the model: {}",
        b.proc.log()
    );

    // A request for the unloaded model loads it again, and is answered.
    let (status, body, node) = generate(&head, SECOND).await?;
    ensure!(
        status == 200,
        "a request for an unloaded model should load it and succeed: {status} {body}\n{}",
        head.proc.log()
    );
    let node = node.context("the answer names no node")?;
    ensure!(loaded_on(&head, SECOND).await?.contains(&node));

    // `superfluid models` lists, unloads and loads by hand.
    let list = models_cli(&head, &["list"])?;
    ensure!(list.status.success(), "models list: {}", list.describe());
    ensure!(
        list.stdout.contains(SECOND) && list.stdout.contains(&node),
        "models list should show {SECOND} on {node}: {}",
        list.stdout
    );
    let unload = models_cli(&head, &["unload", SECOND])?;
    ensure!(
        unload.status.success(),
        "models unload: {}",
        unload.describe()
    );
    wait_loaded(&head, SECOND, Duration::from_secs(20), <[String]>::is_empty).await?;
    // The node lacks the file: it fetches it from the head, then loads it.
    let load = models_cli(&head, &["load", SECOND, "--node", "smol-node"])?;
    ensure!(load.status.success(), "models load: {}", load.describe());
    ensure!(
        a.proc
            .log()
            .contains("fetching a model the head placed here"),
        "smol-node should fetch {SECOND} from the head: {}",
        a.proc.log()
    );
    ensure!(
        loaded_on(&head, SECOND)
            .await?
            .contains(&"smol-node".to_owned()),
        "after `models load --node smol-node`: {:?}",
        loaded_on(&head, SECOND).await?
    );
    // The node's own metrics show a series for each model loaded there now
    // (its first one may have been unloaded as idle meanwhile).
    let page = node_metrics(&a).await?;
    let first_loaded = loaded_on(&head, MODEL)
        .await?
        .contains(&"smol-node".to_owned());
    for (model, loaded) in [(SECOND, true), (MODEL, first_loaded)] {
        let series = format!("superfluid_engine_slots{{model=\"{model}\"}}");
        ensure!(
            page.contains(&series) == loaded,
            "{series} on smol-node's page should be there: {loaded}\n{page}"
        );
    }
    // Ollama's clients unload with `keep_alive: 0` and an empty prompt, and
    // load with an empty prompt alone.
    let ollama = |body: Value| {
        let request = head.client.post(head.url("/api/generate")).json(&body);
        async move { anyhow::Ok(request.send().await?.json::<Value>().await?) }
    };
    let unloaded = ollama(json!({"model": SECOND, "keep_alive": 0})).await?;
    ensure!(unloaded["done_reason"] == "unload", "{unloaded}");
    wait_loaded(&head, SECOND, Duration::from_secs(20), <[String]>::is_empty).await?;
    let loaded = ollama(json!({"model": SECOND, "keep_alive": "10m"})).await?;
    ensure!(loaded["done_reason"] == "load", "{loaded}");
    ensure!(
        !loaded_on(&head, SECOND).await?.is_empty(),
        "loaded by Ollama's empty request"
    );

    let unknown = models_cli(&head, &["load", "no-such-model"])?;
    ensure!(
        !unknown.status.success()
            && unknown.stderr.contains("404")
            && unknown.stderr.contains(SECOND),
        "loading an unknown model should fail clearly: {}",
        unknown.describe()
    );
    let nowhere = models_cli(&head, &["load", SECOND, "--node", "no-such-node"])?;
    ensure!(
        !nowhere.status.success() && nowhere.stderr.contains("no node \"no-such-node\""),
        "loading on an unknown node should say so: {}",
        nowhere.describe()
    );
    let keyless = models_cli(&head, &["list", "--admin-key", "not-the-key"])?;
    ensure!(
        !keyless.status.success() && keyless.stderr.contains("401"),
        "the model routes need the admin key: {}",
        keyless.describe()
    );
    Ok(())
}
