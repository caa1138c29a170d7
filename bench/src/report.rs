//! Runs every contender on the same requests and puts the numbers side by side.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::LlamaModel;
use serde::Serialize;
use superfluid_node::llama::{LlamaConfig, LlamaEngine};
use superfluid_node::Engine;

use crate::stats::{paired_median_difference, prefill_rate, summarise, RequestTiming, Summary};
use crate::{http, inprocess, workload, ServeArgs};

/// One contender's numbers.
#[derive(Debug, Serialize)]
pub struct Contender {
    pub name: String,
    pub streams: Vec<Summary>,
    pub prefill_tokens_per_s: f64,
}

/// How one contender compares with another.
#[derive(Debug, Serialize)]
pub struct Ratios {
    pub of: String,
    pub to: String,
    pub decode_c1: f64,
    pub decode_c4: f64,
    pub prefill: f64,
    pub ttft_p50_overhead_ms_c1: f64,
    pub ttft_p50_overhead_ms_c4: f64,
    /// The median over the same requests of `of`'s time to first token
    /// minus `to`'s (both ran the same prompts in the same order).
    pub ttft_paired_overhead_ms_c1: f64,
    pub ttft_paired_overhead_ms_c4: f64,
}

/// The whole report of `bench serve`.
#[derive(Debug, Serialize)]
pub struct Report {
    pub model: String,
    pub threads: u32,
    pub slots: u32,
    pub max_tokens: u32,
    pub rounds: u32,
    /// Requests sent alone per round.
    pub alone: u32,
    pub contenders: Vec<Contender>,
    pub ratios: Vec<Ratios>,
}

enum Target<'a> {
    InProcess(&'a Arc<dyn Engine>),
    Http { base: &'a str, model: &'a str },
}

struct Bench<'a> {
    args: &'a ServeArgs,
    vocab: &'a LlamaModel,
    client: reqwest::Client,
}

impl Bench<'_> {
    fn tokens(&self, text: &str) -> Vec<u32> {
        let vocab = self.vocab.vocab();
        vocab
            .tokenize(text.as_bytes(), true, true)
            .iter()
            .map(|t| t.0 as u32)
            .collect()
    }

    async fn one(&self, target: &Target<'_>, text: &str, max_tokens: u32) -> Result<RequestTiming> {
        let tokens = self.tokens(text);
        match target {
            Target::InProcess(engine) => inprocess::complete(engine, tokens, max_tokens).await,
            Target::Http { base, model } => {
                http::complete(
                    &self.client,
                    base,
                    model,
                    text,
                    tokens.len() as u32,
                    max_tokens,
                )
                .await
            }
        }
    }

    /// One round on `target`: requests alone, one after another, then 4 at
    /// once, then a long prompt for prefill; every prompt fresh in this round.
    async fn round(&self, target: &Target<'_>, round: u32, into: &mut Samples) -> Result<()> {
        for s in 0..self.args.alone as usize {
            let prompt = workload::story_prompt(round + 100, s);
            let start = Instant::now();
            into.streams[0].push(self.one(target, &prompt, self.args.max_tokens).await?);
            into.wall[0] += start.elapsed();
        }
        let start = Instant::now();
        let batch = futures::future::join_all((0..4).map(|s| {
            let prompt = workload::story_prompt(round + 400, s);
            async move { self.one(target, &prompt, self.args.max_tokens).await }
        }))
        .await;
        into.wall[1] += start.elapsed();
        for t in batch {
            into.streams[1].push(t?);
        }
        into.prefill.push(
            self.one(target, &workload::long_prompt(round + 500), 1)
                .await?,
        );
        Ok(())
    }
}

/// What one contender measured over the rounds.
#[derive(Default)]
struct Samples {
    /// Requests at 1 and at 4 concurrent streams.
    streams: [Vec<RequestTiming>; 2],
    /// Wall time of the rounds at 1 and at 4 streams.
    wall: [Duration; 2],
    /// The long prompts.
    prefill: Vec<RequestTiming>,
}

impl Samples {
    fn contender(&self, name: &str) -> Contender {
        Contender {
            name: name.into(),
            streams: vec![
                summarise(1, &self.streams[0], self.wall[0]),
                summarise(4, &self.streams[1], self.wall[1]),
            ],
            prefill_tokens_per_s: prefill_rate(&self.prefill),
        }
    }
}

/// Runs every contender on the same rounds, interleaved: round `r` visits
/// them all, starting with a different one each round, so a machine that
/// speeds up or slows down during the run weighs on all of them alike.
async fn interleaved(bench: &Bench<'_>, targets: &[(&str, Target<'_>)]) -> Result<Vec<Contender>> {
    for (name, target) in targets {
        bench
            .one(target, &workload::story_prompt(999, 0), 8)
            .await
            .with_context(|| format!("warm-up request to {name}"))?;
    }
    let mut samples: Vec<Samples> = targets.iter().map(|_| Samples::default()).collect();
    for round in 0..bench.args.rounds {
        for k in 0..targets.len() {
            let i = (round as usize + k) % targets.len();
            let (name, target) = &targets[i];
            bench
                .round(target, round, &mut samples[i])
                .await
                .with_context(|| format!("measuring {name}"))?;
        }
    }
    Ok(targets
        .iter()
        .zip(&samples)
        .map(|((name, _), s)| s.contender(name))
        .collect())
}

fn at(c: &Contender, i: usize) -> &Summary {
    &c.streams[i]
}

fn ratios(of: &Contender, to: &Contender) -> Ratios {
    Ratios {
        of: of.name.clone(),
        to: to.name.clone(),
        decode_c1: at(of, 0).decode_tokens_per_s / at(to, 0).decode_tokens_per_s,
        decode_c4: at(of, 1).decode_tokens_per_s / at(to, 1).decode_tokens_per_s,
        prefill: of.prefill_tokens_per_s / to.prefill_tokens_per_s,
        ttft_p50_overhead_ms_c1: at(of, 0).ttft_p50_ms - at(to, 0).ttft_p50_ms,
        ttft_p50_overhead_ms_c4: at(of, 1).ttft_p50_ms - at(to, 1).ttft_p50_ms,
        ttft_paired_overhead_ms_c1: paired_median_difference(
            &at(of, 0).ttft_ms,
            &at(to, 0).ttft_ms,
        ),
        ttft_paired_overhead_ms_c4: paired_median_difference(
            &at(of, 1).ttft_ms,
            &at(to, 1).ttft_ms,
        ),
    }
}

/// `bench serve`: the in-process engine, `superfluid serve` and llama-server
/// (when given), all started first and then measured round by round.
pub async fn serve(args: &ServeArgs) -> Result<Report> {
    llama_cpp_2::send_logs_to_tracing(llama_cpp_2::LogOptions::default().with_logs_enabled(false));
    let backend = Arc::new(LlamaBackend::init()?);
    let params = LlamaModelParams::default().with_vocab_only(true);
    let vocab = LlamaModel::load_from_file(&backend, &args.model, &params)
        .context("loading the vocabulary")?;
    let bench = Bench {
        args,
        vocab: &vocab,
        // A fresh connection per request: servers that close idle
        // keep-alive connections would otherwise race the next request.
        client: reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .build()?,
    };
    let model_id = superfluid_proto::model_id_from_path(&args.model);

    let config = LlamaConfig {
        model_path: args.model.clone(),
        slots: args.slots,
        ctx: args.ctx,
        threads: args.threads,
        ..LlamaConfig::default()
    };
    let engine: Arc<dyn Engine> = Arc::new(LlamaEngine::start(backend.clone(), config)?);

    let (t, s, c) = (
        args.threads.to_string(),
        args.slots.to_string(),
        args.ctx.to_string(),
    );
    let serve_args: Vec<String> = [
        "serve",
        "--http",
        "127.0.0.1:{port}",
        "--threads",
        &t,
        "--slots",
        &s,
        "--ctx",
        &c,
        "--model",
    ]
    .iter()
    .map(|a| a.to_string())
    .chain([args.model.display().to_string()])
    .collect();
    let serve = http::start(&args.superfluid, &serve_args)
        .await
        .context("starting superfluid serve")?;
    let llama_server = match &args.llama_server {
        Some(binary) => {
            let total_ctx = (args.ctx * args.slots).to_string();
            let ls_args: Vec<String> = [
                "--host",
                "127.0.0.1",
                "--port",
                "{port}",
                "-t",
                &t,
                "-tb",
                &t,
                "-np",
                &s,
                "-c",
                &total_ctx,
                "-m",
            ]
            .iter()
            .map(|a| a.to_string())
            .chain([args.model.display().to_string()])
            .collect();
            Some(
                http::start(binary, &ls_args)
                    .await
                    .context("starting llama-server")?,
            )
        }
        None => None,
    };
    let mut targets = vec![
        ("in_process", Target::InProcess(&engine)),
        (
            "superfluid_serve",
            Target::Http {
                base: &serve.base,
                model: &model_id,
            },
        ),
    ];
    if let Some(server) = &llama_server {
        targets.push((
            "llama_server",
            Target::Http {
                base: &server.base,
                model: &model_id,
            },
        ));
    }
    let contenders = interleaved(&bench, &targets).await?;
    drop(targets);
    drop((serve, llama_server, engine));

    let mut all = vec![ratios(&contenders[1], &contenders[0])];
    if contenders.len() > 2 {
        all.push(ratios(&contenders[0], &contenders[2]));
        all.push(ratios(&contenders[1], &contenders[2]));
    }
    Ok(Report {
        model: model_id,
        threads: args.threads,
        slots: args.slots,
        max_tokens: args.max_tokens,
        rounds: args.rounds,
        alone: args.alone,
        contenders,
        ratios: all,
    })
}

/// A human-readable table of the report.
pub fn print_table(report: &Report) {
    println!(
        "model {} threads {} slots {} max_tokens {}",
        report.model, report.threads, report.slots, report.max_tokens
    );
    for c in &report.contenders {
        for s in &c.streams {
            println!(
                "{:<18} streams {}  decode {:>7.1} tok/s  ttft p50 {:>7.1} ms",
                c.name, s.concurrency, s.decode_tokens_per_s, s.ttft_p50_ms
            );
        }
        println!(
            "{:<18} prefill {:>7.1} tok/s",
            c.name, c.prefill_tokens_per_s
        );
    }
    for r in &report.ratios {
        println!(
            "{} / {}: decode x{:.3} (1 stream) x{:.3} (4 streams), prefill x{:.3}, ttft p50 {:+.1} ms (1) {:+.1} ms (4), paired {:+.1} ms (1) {:+.1} ms (4)",
            r.of, r.to, r.decode_c1, r.decode_c4, r.prefill, r.ttft_p50_overhead_ms_c1, r.ttft_p50_overhead_ms_c4,
            r.ttft_paired_overhead_ms_c1, r.ttft_paired_overhead_ms_c4
        );
    }
}
