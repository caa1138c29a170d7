//! Runs every contender on the same requests and puts the numbers side by side.

use std::sync::Arc;

use anyhow::{Context, Result};
use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::LlamaModel;
use serde::Serialize;
use superfluid_node::llama::{LlamaConfig, LlamaEngine};
use superfluid_node::Engine;

use crate::contenders::{Contenders, Memory, PAIRS};
use crate::embeddings::{self, EmbeddingsReport};
use crate::kv_cache::{self, KvCacheReport};
use crate::measure::{interleaved, Bench, Contender};
use crate::scraper::ScrapeCounts;
use crate::stats::{paired_median_difference, Spread, Summary};
use crate::structured::{self, StructuredReport};
use crate::{ServeArgs, ServePart};

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
    /// `decode_c1` and `decode_c4` of each round alone.
    pub decode_by_round: Vec<[f64; 2]>,
    /// The quartiles of `of`'s decode rate over `to`'s, request by request
    /// at 1 stream: each pair ran the same prompt seconds apart, so the
    /// machine's drift between pairs drops out.
    pub decode_c1_paired: Spread,
    /// The same at 4 streams, batch by batch.
    pub decode_c4_paired: Spread,
    /// The quartiles of `of`'s prefill rate over `to`'s, long prompt by long
    /// prompt.
    pub prefill_paired: Spread,
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
    /// Batches of 4 streams per round.
    pub together: u32,
    /// Long prompts per round.
    pub prefill: u32,
    pub contenders: Vec<Contender>,
    pub ratios: Vec<Ratios>,
    /// What the poller of `serve_scraped`'s `/metrics` did.
    pub scrapes: Option<ScrapeCounts>,
    /// The memory of `superfluid_serve`, its engine host and
    /// `serve_engine_in_process` after the rounds, beside the model file.
    pub memory: Option<Memory>,
    /// Chat with a JSON schema against the same chat without one.
    pub structured: Option<StructuredReport>,
    /// superfluid serve's /v1/embeddings against llama-server's.
    pub embeddings: Option<EmbeddingsReport>,
    /// Decode with q8_0 and q4_0 KV caches against f16.
    pub kv_cache: Option<KvCacheReport>,
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
        decode_by_round: of
            .decode_by_round
            .iter()
            .zip(&to.decode_by_round)
            .map(|(a, b)| [a[0] / b[0], a[1] / b[1]])
            .collect(),
        decode_c1_paired: Spread::of_ratios(&at(of, 0).decode_each, &at(to, 0).decode_each),
        decode_c4_paired: Spread::of_ratios(&of.decode_c4_each, &to.decode_c4_each),
        prefill_paired: Spread::of_ratios(&of.prefill_each, &to.prefill_each),
    }
}

/// `bench serve`: the in-process engine, `superfluid serve` through each of
/// its APIs (and with `--engine-in-process`), heads with and without keys, a scraped serve and llama-server
/// (when given), all started first and then measured round by round; then
/// structured output against free text, then embeddings against
/// llama-server's. `--only` picks some of the three steps.
pub async fn serve(args: &ServeArgs) -> Result<Report> {
    llama_cpp_2::send_logs_to_tracing(llama_cpp_2::LogOptions::default().with_logs_enabled(false));
    // A fresh connection per request: servers that close idle keep-alive
    // connections would otherwise race the next request.
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()?;
    let model_id = superfluid_proto::model_id_from_path(&args.model);
    let (measured, scrapes, memory) = if args.runs(ServePart::Contenders) {
        let (measured, scrapes, memory) = contenders(args, &client, &model_id).await?;
        (measured, Some(scrapes), Some(memory))
    } else {
        (Vec::new(), None, None)
    };
    let structured = if args.runs(ServePart::Structured) {
        Some(structured::run(args, &client).await?)
    } else {
        None
    };
    let embeddings = if args.runs(ServePart::Embeddings) {
        Some(embeddings::run(args, &client, &args.embedding_model()).await?)
    } else {
        None
    };
    let kv_cache = if args.runs(ServePart::KvCache) {
        Some(kv_cache::run(args, &client).await?)
    } else {
        None
    };

    let by_name = |name: &str| measured.iter().find(|c| c.name == name);
    let all = PAIRS
        .iter()
        .filter_map(|(of, to)| Some(ratios(by_name(of)?, by_name(to)?)))
        .collect();
    Ok(Report {
        model: model_id,
        threads: args.threads,
        slots: args.slots,
        max_tokens: args.max_tokens,
        rounds: args.rounds,
        alone: args.alone,
        together: args.together,
        prefill: args.prefill,
        contenders: measured,
        ratios: all,
        scrapes,
        memory,
        structured,
        embeddings,
        kv_cache,
    })
}

/// The contenders step: every contender started, then measured round by
/// round, interleaved; then the memory of serve's processes.
async fn contenders(
    args: &ServeArgs,
    client: &reqwest::Client,
    model_id: &str,
) -> Result<(Vec<Contender>, ScrapeCounts, Memory)> {
    let backend = Arc::new(LlamaBackend::init()?);
    let params = LlamaModelParams::default().with_vocab_only(true);
    let vocab = LlamaModel::load_from_file(&backend, &args.model, &params)
        .context("loading the vocabulary")?;
    let bench = Bench {
        args,
        vocab: &vocab,
        client: client.clone(),
    };
    let config = LlamaConfig {
        model_path: args.model.clone(),
        slots: args.slots,
        ctx: args.ctx,
        threads: args.threads,
        ..LlamaConfig::default()
    };
    let engine: Arc<dyn Engine> = Arc::new(LlamaEngine::start(backend.clone(), config)?);

    let contenders = Contenders::start(args).await?;
    let targets = contenders.targets(&engine, model_id);
    let measured = interleaved(&bench, &targets).await?;
    drop(targets);
    let scrapes = contenders.scraper.counts();
    let memory = contenders.memory(&args.model)?;
    drop((contenders, engine));
    Ok((measured, scrapes, memory))
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
                "{:<23} streams {}  decode {:>7.1} tok/s  ttft p50 {:>7.1} ms",
                c.name, s.concurrency, s.decode_tokens_per_s, s.ttft_p50_ms
            );
        }
        println!(
            "{:<23} prefill {:>7.1} tok/s",
            c.name, c.prefill_tokens_per_s
        );
    }
    if let Some(s) = &report.scrapes {
        println!(
            "serve_scraped: {} scrapes of /metrics every {} ms while measured ({} failed, {} bytes in all)",
            s.scrapes, s.interval_ms, s.failed, s.bytes
        );
    }
    if let Some(m) = &report.memory {
        print_memory(m);
    }
    for r in &report.ratios {
        println!(
            "{} / {}: decode x{:.3} (1 stream) x{:.3} (4 streams), prefill x{:.3}, ttft p50 {:+.1} ms (1) {:+.1} ms (4), paired {:+.1} ms (1) {:+.1} ms (4)",
            r.of, r.to, r.decode_c1, r.decode_c4, r.prefill, r.ttft_p50_overhead_ms_c1, r.ttft_p50_overhead_ms_c4,
            r.ttft_paired_overhead_ms_c1, r.ttft_paired_overhead_ms_c4
        );
        for (what, p) in [
            ("decode at 1 stream", &r.decode_c1_paired),
            ("decode at 4 streams", &r.decode_c4_paired),
            ("prefill", &r.prefill_paired),
        ] {
            println!(
                "{} / {}: paired {what} x{:.3} (quartiles x{:.3} to x{:.3}, {} pairs)",
                r.of, r.to, p.p50, p.p25, p.p75, p.n
            );
        }
    }
    if let Some(s) = &report.structured {
        structured::print_table(s);
    }
    if let Some(e) = &report.embeddings {
        embeddings::print_table(e);
    }
    if let Some(k) = &report.kv_cache {
        kv_cache::print_table(k);
    }
}

/// The memory line of the table, in MiB: each process's VmRSS, and in
/// parentheses the part of it mapped from files.
fn print_memory(m: &Memory) {
    let mib = |b: Option<u64>| b.map_or("?".into(), |b| format!("{:.1}", b as f64 / 1048576.0));
    println!(
        "memory after the rounds, MiB resident (of it mapped from files): \
         superfluid_serve {} ({}) + its engine host {} ({}); \
         serve_engine_in_process {} ({}); model file {}",
        mib(m.serve_rss_bytes),
        mib(m.serve_rss_file_bytes),
        mib(m.engine_host_rss_bytes),
        mib(m.engine_host_rss_file_bytes),
        mib(m.serve_engine_in_process_rss_bytes),
        mib(m.serve_engine_in_process_rss_file_bytes),
        mib(Some(m.model_file_bytes)),
    );
}
