//! Runs every contender on the same requests and puts the numbers side by side.

use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};
use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::LlamaModel;
use serde::Serialize;
use superfluid_node::llama::{LlamaConfig, LlamaEngine};
use superfluid_node::Engine;

use crate::stats::{prefill_rate, summarise, RequestTiming, Summary};
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
}

/// The whole report of `bench serve`.
#[derive(Debug, Serialize)]
pub struct Report {
    pub model: String,
    pub threads: u32,
    pub slots: u32,
    pub max_tokens: u32,
    pub rounds: u32,
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

    async fn measure(&self, name: &str, target: Target<'_>) -> Result<Contender> {
        self.one(&target, &workload::story_prompt(999, 0), 8)
            .await
            .context("warm-up request")?;
        let mut streams = Vec::new();
        for concurrency in [1usize, 4] {
            let (mut timings, mut wall) = (Vec::new(), std::time::Duration::ZERO);
            for round in 0..self.args.rounds {
                let round = round + 100 * concurrency as u32;
                let start = Instant::now();
                let batch = futures::future::join_all((0..concurrency).map(|s| {
                    let prompt = workload::story_prompt(round, s);
                    let target = &target;
                    async move { self.one(target, &prompt, self.args.max_tokens).await }
                }))
                .await;
                wall += start.elapsed();
                for t in batch {
                    timings.push(t?);
                }
            }
            streams.push(summarise(concurrency, &timings, wall));
        }
        let mut prefill = Vec::new();
        for round in 0..self.args.rounds {
            prefill.push(
                self.one(&target, &workload::long_prompt(round + 500), 1)
                    .await?,
            );
        }
        Ok(Contender {
            name: name.into(),
            streams,
            prefill_tokens_per_s: prefill_rate(&prefill),
        })
    }
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
    }
}

/// `bench serve`: in-process engine, then `superfluid serve`, then llama-server.
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
    let mut contenders = Vec::new();

    let config = LlamaConfig {
        model_path: args.model.clone(),
        slots: args.slots,
        ctx: args.ctx,
        threads: args.threads,
        ..LlamaConfig::default()
    };
    let engine: Arc<dyn Engine> = Arc::new(LlamaEngine::start(backend.clone(), config)?);
    contenders.push(
        bench
            .measure("in_process", Target::InProcess(&engine))
            .await
            .context("measuring the engine in-process")?,
    );
    drop(engine);

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
    let server = http::start(&args.superfluid, &serve_args).await?;
    let measured = bench
        .measure(
            "superfluid_serve",
            Target::Http {
                base: &server.base,
                model: &model_id,
            },
        )
        .await;
    drop(server);
    contenders.push(measured.context("measuring superfluid serve")?);

    if let Some(llama_server) = &args.llama_server {
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
        let server = http::start(llama_server, &ls_args).await?;
        let measured = bench
            .measure(
                "llama_server",
                Target::Http {
                    base: &server.base,
                    model: &model_id,
                },
            )
            .await;
        drop(server);
        contenders.push(measured.context("measuring llama-server")?);
    }

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
            "{} / {}: decode x{:.3} (1 stream) x{:.3} (4 streams), prefill x{:.3}, ttft p50 {:+.1} ms (1) {:+.1} ms (4)",
            r.of, r.to, r.decode_c1, r.decode_c4, r.prefill, r.ttft_p50_overhead_ms_c1, r.ttft_p50_overhead_ms_c4
        );
    }
}
