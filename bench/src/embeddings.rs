//! `bench serve`'s embeddings step: `superfluid serve --embedding-model`
//! against llama-server `--embeddings` on the same GGUF, through the same
//! `/v1/embeddings` requests, paired step by step.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::Serialize;
use serde_json::{json, Value};

use crate::contenders::{owned, serve_args};
use crate::http::{self, ServerProcess};
use crate::stats::Spread;
use crate::ServeArgs;

/// Sequences superfluid's embedding engine computes in one decode, each of
/// up to 512 tokens (all-MiniLM-L6-v2's context): llama-server is given as
/// many slots of as many tokens, so each can pack the same batch.
const LLAMA_SERVER_SLOTS: u32 = 16;
const LLAMA_SERVER_SLOT_CTX: u32 = 512;

const SUBJECTS: [&str; 8] = [
    "The harbour master",
    "A small grey cat",
    "The city council",
    "Our new neighbour",
    "The night train",
    "A tired student",
    "The old bakery",
    "Heavy autumn rain",
];
const ACTIONS: [&str; 6] = [
    "quietly closed the gate behind",
    "was seen again near",
    "wrote a long letter about",
    "slowly flooded the road to",
    "argued for an hour over",
    "took a photograph of",
];

/// Input `i` of step `step` in round `round`: a short sentence, fresh in
/// every round, different in length from its neighbours.
pub fn sentence(round: u32, step: usize, i: usize) -> String {
    let subject = SUBJECTS[i % SUBJECTS.len()];
    let action = ACTIONS[(i / SUBJECTS.len() + step) % ACTIONS.len()];
    let tail = if i % 3 == 0 {
        ", and nobody in the village could say why it happened on that particular morning"
    } else {
        ""
    };
    format!("{subject} {action} the market on street {round}-{step}-{i}{tail}.")
}

/// Embeddings per second of one contender, over all its requests.
#[derive(Debug, Serialize)]
pub struct Rates {
    /// Requests of `batch_size` inputs.
    pub batch_embeddings_per_s: f64,
    /// Requests of one input each, one after another.
    pub single_embeddings_per_s: f64,
}

/// What the embeddings step measured.
#[derive(Debug, Serialize)]
pub struct EmbeddingsReport {
    pub model: String,
    /// Inputs per batch request.
    pub batch_size: u32,
    /// Batch requests per round, and single-input requests per round.
    pub batches: u32,
    pub singles: u32,
    pub rounds: u32,
    pub superfluid_serve: Rates,
    /// Absent when no llama-server was given.
    pub llama_server: Option<Rates>,
    /// The quartiles of superfluid_serve / llama_server embeddings/s,
    /// request by request for batches and round by round for singles.
    pub batch_paired: Option<Spread>,
    pub single_paired: Option<Spread>,
}

/// One contender's samples: each batch's and each round of singles' rate.
#[derive(Default)]
struct Samples {
    batch: Vec<f64>,
    batch_time: (u32, Duration),
    single: Vec<f64>,
    single_time: (u32, Duration),
}

impl Samples {
    fn rates(&self) -> Rates {
        let rate = |(n, t): (u32, Duration)| f64::from(n) / t.as_secs_f64().max(1e-9);
        Rates {
            batch_embeddings_per_s: rate(self.batch_time),
            single_embeddings_per_s: rate(self.single_time),
        }
    }
}

/// One `/v1/embeddings` request for `inputs`; checks that every vector came
/// back and returns the time it took.
async fn embed(
    client: &reqwest::Client,
    base: &str,
    model: &str,
    inputs: &[String],
) -> Result<Duration> {
    let body = json!({"model": model, "input": inputs});
    let url = format!("{base}/v1/embeddings");
    let start = Instant::now();
    let resp = client.post(&url).json(&body).send().await?;
    if !resp.status().is_success() {
        bail!("{url} answered {}: {}", resp.status(), resp.text().await?);
    }
    let answer: Value = resp.json().await?;
    let elapsed = start.elapsed();
    let data = answer["data"].as_array().map_or(&[][..], Vec::as_slice);
    if data.len() != inputs.len()
        || data
            .iter()
            .any(|d| d["embedding"].as_array().is_none_or(Vec::is_empty))
    {
        bail!(
            "{url} answered {} vectors for {} inputs",
            data.len(),
            inputs.len()
        );
    }
    Ok(elapsed)
}

/// Which step of a round.
#[derive(Clone, Copy)]
enum Step {
    /// Batch request `n` of the round.
    Batch(usize),
    /// Every single-input request of the round, one after another.
    Singles,
}

async fn step(
    client: &reqwest::Client,
    (base, model): (&str, &str),
    args: &ServeArgs,
    round: u32,
    step: Step,
    into: &mut Samples,
) -> Result<()> {
    match step {
        Step::Batch(n) => {
            let inputs: Vec<String> = (0..args.embed_batch as usize)
                .map(|i| sentence(round, n, i))
                .collect();
            let took = embed(client, base, model, &inputs).await?;
            into.batch
                .push(f64::from(args.embed_batch) / took.as_secs_f64().max(1e-9));
            into.batch_time.0 += args.embed_batch;
            into.batch_time.1 += took;
        }
        Step::Singles => {
            let mut took = Duration::ZERO;
            for i in 0..args.embed_singles as usize {
                let input = [sentence(round, 1000, i)];
                took += embed(client, base, model, &input).await?;
            }
            into.single
                .push(f64::from(args.embed_singles) / took.as_secs_f64().max(1e-9));
            into.single_time.0 += args.embed_singles;
            into.single_time.1 += took;
        }
    }
    Ok(())
}

async fn start_llama_server(
    binary: &Path,
    args: &ServeArgs,
    model: &Path,
) -> Result<ServerProcess> {
    let t = args.threads.to_string();
    let ls_args = owned(&[
        "--host",
        "127.0.0.1",
        "--port",
        "{port}",
        "-t",
        &t,
        "-tb",
        &t,
        "-np",
        &LLAMA_SERVER_SLOTS.to_string(),
        "-c",
        &(LLAMA_SERVER_SLOTS * LLAMA_SERVER_SLOT_CTX).to_string(),
        "--embeddings",
        "-m",
        &model.display().to_string(),
    ]);
    http::start(binary, &ls_args)
        .await
        .context("starting llama-server --embeddings")
}

/// Starts `superfluid serve --embedding-model` (and llama-server
/// `--embeddings` when one is given) and measures both, step by step, the
/// one that goes first alternating.
pub async fn run(
    args: &ServeArgs,
    client: &reqwest::Client,
    model_path: &Path,
) -> Result<EmbeddingsReport> {
    let serve = http::start(&args.superfluid, &serve_args(args, Some(model_path)))
        .await
        .context("starting superfluid serve --embedding-model")?;
    let llama_server = match &args.llama_server {
        Some(binary) => Some(start_llama_server(binary, args, model_path).await?),
        None => None,
    };
    let model = superfluid_proto::model_id_from_path(model_path);
    let mut targets = vec![("superfluid_serve", serve.base.as_str())];
    if let Some(server) = &llama_server {
        targets.push(("llama_server", server.base.as_str()));
    }
    for (name, base) in &targets {
        embed(client, base, &model, &[sentence(999, 0, 0)])
            .await
            .with_context(|| format!("warm-up embedding from {name}"))?;
    }
    let steps: Vec<Step> = (0..args.embed_batches as usize)
        .map(Step::Batch)
        .chain(std::iter::once(Step::Singles))
        .collect();
    let mut samples: Vec<Samples> = targets.iter().map(|_| Samples::default()).collect();
    let mut turn = 0;
    for round in 0..args.rounds {
        eprintln!(
            "bench: embeddings, round {} of {}: {} batches of {} and {} single inputs on each of {} contenders",
            round + 1,
            args.rounds,
            args.embed_batches,
            args.embed_batch,
            args.embed_singles,
            targets.len()
        );
        for &s in &steps {
            for k in 0..targets.len() {
                let i = (turn + k) % targets.len();
                let (name, base) = targets[i];
                step(client, (base, &model), args, round, s, &mut samples[i])
                    .await
                    .with_context(|| format!("embeddings from {name}"))?;
            }
            turn += 1;
        }
    }
    let paired = |of: &[f64], to: Option<&Vec<f64>>| to.map(|to| Spread::of_ratios(of, to));
    let other = samples.get(1);
    Ok(EmbeddingsReport {
        model,
        batch_size: args.embed_batch,
        batches: args.embed_batches,
        singles: args.embed_singles,
        rounds: args.rounds,
        superfluid_serve: samples[0].rates(),
        llama_server: other.map(Samples::rates),
        batch_paired: paired(&samples[0].batch, other.map(|s| &s.batch)),
        single_paired: paired(&samples[0].single, other.map(|s| &s.single)),
    })
}

/// The step's lines of `bench serve`'s table.
pub fn print_table(r: &EmbeddingsReport) {
    let rows = std::iter::once(("superfluid_serve", &r.superfluid_serve))
        .chain(r.llama_server.iter().map(|l| ("llama_server", l)));
    for (name, rates) in rows {
        println!(
            "{name:<18} embeddings {:>7.1}/s in batches of {}, {:>7.1}/s one at a time ({})",
            rates.batch_embeddings_per_s, r.batch_size, rates.single_embeddings_per_s, r.model
        );
    }
    if r.llama_server.is_none() {
        println!("llama_server: embeddings not measured (set LLAMA_SERVER to its binary)");
    }
    for (what, p) in [
        ("batches", &r.batch_paired),
        ("single inputs", &r.single_paired),
    ] {
        if let Some(p) = p {
            println!(
                "superfluid_serve / llama_server: paired embeddings/s, {what} x{:.3} (quartiles x{:.3} to x{:.3}, {} pairs)",
                p.p50, p.p25, p.p75, p.n
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_sentence_of_a_run_is_different() {
        let all: std::collections::HashSet<String> = (0..6)
            .flat_map(|round| {
                (0..3).flat_map(move |step| (0..32).map(move |i| sentence(round, step, i)))
            })
            .collect();
        assert_eq!(all.len(), 6 * 3 * 32);
        // Lengths vary, so a batch is not 32 copies of one shape.
        let lengths: std::collections::HashSet<usize> =
            (0..32).map(|i| sentence(0, 0, i).len()).collect();
        assert!(lengths.len() > 4, "{lengths:?}");
    }
}
