//! `load`: many streaming clients at once through `superfluid head` and
//! fake-engine node processes, against the same fake engines called
//! in-process (no head, no Link F, no HTTP) with the same generations.
//!
//! Reports the head's CPU time per streamed token (its utime + stime from
//! `/proc/PID/stat`, before and after each round) and the pause between
//! tokens a client sees, p50 and p99, with what the fleet adds to the
//! in-process pauses. Every failed or cut stream is counted; there should
//! be none.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use futures::StreamExt;
use serde::Serialize;
use serde_json::json;
use superfluid_node::fake::{FakeCosts, FakeEngine};
use superfluid_node::Engine;
use superfluid_proto::{GenerateEvent, ModelDescription};

use crate::fleet::{Head, Place};
use crate::http::drain_chunks;
use crate::stats::percentile;

/// The load's shape.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Shape {
    pub clients: usize,
    pub nodes: usize,
    pub slots_per_node: u32,
    pub max_tokens: u32,
    pub rounds: u32,
}

/// One contender's pauses between tokens over all rounds.
#[derive(Debug, Default, Serialize)]
pub struct Pauses {
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// Tokens streamed in all.
    pub tokens: u64,
    /// Events that carried text: a client sees a pause per event.
    pub events: u64,
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub shape: Shape,
    pub in_process: Pauses,
    pub through_head: Pauses,
    /// `through_head` minus `in_process`.
    pub added_p50_ms: f64,
    pub added_p99_ms: f64,
    /// The head process's CPU time over the tokens it streamed.
    pub head_cpu_us_per_token: f64,
    /// Streams that failed, ended early or carried an error event.
    pub errors: usize,
    /// The first few errors, as they were.
    pub error_samples: Vec<String>,
}

/// Runs the load with `bin` serving `model`.
pub async fn run(bin: &Path, model: &Path, shape: Shape) -> Result<Report> {
    let head = Head::start(bin, model, Place::Host, "127.0.0.1")?;
    let mut nodes = Vec::new();
    for i in 0..shape.nodes {
        let mut node = head.join(&Place::Host, &format!("load-{i}"), shape.slots_per_node)?;
        node.start(&head)?;
        nodes.push(node);
    }
    let model_id = superfluid_proto::model_id_from_path(model);
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(shape.clients)
        .build()?;
    let (mut local, mut remote) = (Samples::default(), Samples::default());
    let mut cpu = Duration::ZERO;
    let mut errors = Vec::new();
    for round in 0..shape.rounds {
        in_process(&model_id, shape, &mut local).await?;
        let before = cpu_time(head.proc.pid())?;
        let streamed = through_head(&client, &head, &model_id, shape, round).await;
        cpu += cpu_time(head.proc.pid())?.saturating_sub(before);
        for outcome in streamed {
            match outcome {
                Ok(stream) => remote.add(stream),
                Err(e) => errors.push(format!("{e:#}")),
            }
        }
        eprintln!(
            "load: round {}/{}: {} streams, {} errors so far",
            round + 1,
            shape.rounds,
            shape.clients,
            errors.len()
        );
    }
    drop(nodes);
    let (in_process, through_head) = (local.summary(), remote.summary());
    Ok(Report {
        shape,
        added_p50_ms: through_head.p50_ms - in_process.p50_ms,
        added_p99_ms: through_head.p99_ms - in_process.p99_ms,
        head_cpu_us_per_token: cpu.as_secs_f64() * 1e6 / (through_head.tokens.max(1) as f64),
        in_process,
        through_head,
        errors: errors.len(),
        error_samples: errors.into_iter().take(5).collect(),
    })
}

/// One stream's token count and the arrival of each event with text.
struct Streamed {
    tokens: u64,
    arrivals: Vec<Instant>,
}

#[derive(Default)]
struct Samples {
    pauses_ms: Vec<f64>,
    tokens: u64,
    events: u64,
}

impl Samples {
    fn add(&mut self, s: Streamed) {
        self.tokens += s.tokens;
        self.events += s.arrivals.len() as u64;
        self.pauses_ms.extend(
            s.arrivals
                .windows(2)
                .map(|w| (w[1] - w[0]).as_secs_f64() * 1e3),
        );
    }

    fn summary(mut self) -> Pauses {
        Pauses {
            p50_ms: percentile(&mut self.pauses_ms, 0.5),
            p99_ms: percentile(&mut self.pauses_ms, 0.99),
            tokens: self.tokens,
            events: self.events,
        }
    }
}

/// The same generations on fake engines in this process: as many engines
/// and slots as the fleet has nodes, the clients spread evenly.
async fn in_process(model_id: &str, shape: Shape, into: &mut Samples) -> Result<()> {
    let engines: Vec<Arc<dyn Engine>> = (0..shape.nodes)
        .map(|_| {
            let model = ModelDescription {
                id: model_id.to_owned(),
                ctx: 4096,
                slots: shape.slots_per_node,
                sha256: String::new(),
                ..Default::default()
            };
            Arc::new(FakeEngine::new(model, FakeCosts::default())) as Arc<dyn Engine>
        })
        .collect();
    let runs = (0..shape.clients).map(|i| {
        let engine = engines[i % engines.len()].clone();
        let prompt: Vec<u32> = (0..16).map(|t| 1000 + (i as u32) * 16 + t).collect();
        async move {
            let request = crate::inprocess::greedy(model_id, prompt, shape.max_tokens, None);
            let mut generation = engine.submit(request)?;
            let mut streamed = Streamed {
                tokens: 0,
                arrivals: Vec::new(),
            };
            while let Some(event) = generation.events.recv().await {
                match event {
                    GenerateEvent::Tokens(ids) => {
                        streamed.arrivals.push(Instant::now());
                        streamed.tokens += ids.len() as u64;
                    }
                    GenerateEvent::Logprobs(_) => {}
                    GenerateEvent::Finished(_) => break,
                    GenerateEvent::Failed { message, .. } => {
                        anyhow::bail!("in-process generation failed: {message}")
                    }
                }
            }
            Ok(streamed)
        }
    });
    for streamed in futures::future::join_all(runs).await {
        into.add(streamed?);
    }
    Ok(())
}

/// All clients at once through the head; each stream's outcome.
async fn through_head(
    client: &reqwest::Client,
    head: &Head,
    model_id: &str,
    shape: Shape,
    round: u32,
) -> Vec<Result<Streamed>> {
    let url = format!("{}/v1/completions", head.base());
    let streams = (0..shape.clients).map(|i| {
        let body = json!({
            "model": model_id,
            // Words whose tokens all lie in the fake engine's vocabulary.
            "prompt": format!("Client {i} asks for a long answer about failover, take {round}."),
            "max_tokens": shape.max_tokens,
            "temperature": 0,
            "stream": true,
            "stream_options": {"include_usage": true},
        });
        let call = client
            .post(&url)
            .json(&body)
            .timeout(Duration::from_secs(120));
        async move {
            stream_one(call)
                .await
                .with_context(|| format!("client {i}"))
        }
    });
    futures::future::join_all(streams).await
}

async fn stream_one(call: reqwest::RequestBuilder) -> Result<Streamed> {
    let response = call.send().await?;
    let status = response.status();
    anyhow::ensure!(
        status.is_success(),
        "answered {status}: {}",
        response.text().await.unwrap_or_default()
    );
    let mut body = response.bytes_stream();
    let (mut buf, mut arrivals, mut usage, mut done) = (Vec::new(), Vec::new(), None, false);
    while let Some(bytes) = body.next().await {
        let bytes = bytes?;
        let now = Instant::now();
        buf.extend_from_slice(&bytes);
        done |= buf.windows(12).any(|w| w == b"data: [DONE]");
        for chunk in drain_chunks(&mut buf)? {
            anyhow::ensure!(chunk.get("error").is_none(), "error event: {chunk}");
            if chunk["choices"][0]["text"]
                .as_str()
                .is_some_and(|t| !t.is_empty())
            {
                arrivals.push(now);
            }
            if let Some(n) = chunk["usage"]["completion_tokens"].as_u64() {
                usage = Some(n);
            }
        }
    }
    anyhow::ensure!(done, "the stream ended without [DONE]");
    let tokens = usage.context("no usage chunk")?;
    Ok(Streamed { tokens, arrivals })
}

/// The utime + stime of process `pid`.
fn cpu_time(pid: u32) -> Result<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("reading /proc/{pid}/stat"))?;
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line: 12 and 13 here.
    let ticks = |i: usize| -> Result<u64> {
        fields
            .get(i)
            .and_then(|f| f.parse().ok())
            .with_context(|| format!("/proc/{pid}/stat has no field {}", i + 3))
    };
    Ok(Duration::from_secs_f64(
        (ticks(11)? + ticks(12)?) as f64 / clock_ticks(),
    ))
}

/// `getconf CLK_TCK`, 100 (Linux's usual) if it cannot be read.
fn clock_ticks() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100.0)
}

/// Prints the report as a table.
pub fn print_table(r: &Report) {
    let s = r.shape;
    println!(
        "load: {} streaming clients x {} rounds, {} tokens each, {} fake nodes of {} slots",
        s.clients, s.rounds, s.max_tokens, s.nodes, s.slots_per_node
    );
    println!(
        "{:<14} {:>12} {:>12} {:>10} {:>10}",
        "", "pause p50", "pause p99", "tokens", "events"
    );
    for (name, p) in [
        ("in-process", &r.in_process),
        ("through head", &r.through_head),
    ] {
        println!(
            "{name:<14} {:>10.2}ms {:>10.2}ms {:>10} {:>10}",
            p.p50_ms, p.p99_ms, p.tokens, p.events
        );
    }
    println!(
        "added by the fleet: p50 {:+.2} ms, p99 {:+.2} ms; head CPU {:.1} us per token; errors {}",
        r.added_p50_ms, r.added_p99_ms, r.head_cpu_us_per_token, r.errors
    );
    for e in &r.error_samples {
        println!("  error: {e}");
    }
}
