//! Measures every contender on the same requests, interleaved request by
//! request, so that a machine whose speed drifts weighs on all of them alike.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use llama_cpp_2::model::LlamaModel;
use serde::Serialize;
use superfluid_node::Engine;

use crate::apis::Api;
use crate::scraper::Scraper;
use crate::stats::{prefill_rate, summarise, RequestTiming, Summary};
use crate::{http, inprocess, workload, ServeArgs};

/// One contender's numbers.
#[derive(Debug, Serialize)]
pub struct Contender {
    pub name: String,
    pub streams: Vec<Summary>,
    pub prefill_tokens_per_s: f64,
    /// Each long prompt's prefill tokens/s, in the order sent.
    #[serde(skip)]
    pub prefill_each: Vec<f64>,
    /// Decode tokens/s of each round alone, at 1 and at 4 streams: how far
    /// the machine moved during the run.
    pub decode_by_round: Vec<[f64; 2]>,
    /// Each batch of 4's aggregate decode tokens/s, in the order sent.
    #[serde(skip)]
    pub decode_c4_each: Vec<f64>,
}

/// Where a contender's requests go.
pub enum Target<'a> {
    InProcess(&'a Arc<dyn Engine>),
    /// An OpenAI-compatible server, sent `key` as a Bearer key if there is
    /// one, and scraped by `scraper` while it is measured if there is one.
    Http {
        api: Api,
        base: &'a str,
        model: &'a str,
        key: Option<&'a str>,
        scraper: Option<&'a Scraper>,
    },
}

impl Target<'_> {
    fn scraper(&self) -> Option<&Scraper> {
        match self {
            Target::Http { scraper, .. } => *scraper,
            Target::InProcess(_) => None,
        }
    }
}

/// The bench's client side: the arguments, a tokenizer and an HTTP client.
pub struct Bench<'a> {
    pub args: &'a ServeArgs,
    pub vocab: &'a LlamaModel,
    pub client: reqwest::Client,
}

/// One step of a round, run by every contender before the next step.
#[derive(Clone, Copy)]
enum Step {
    /// Request `n` of the round, sent alone.
    Alone(usize),
    /// Batch `n` of the round: 4 requests at once.
    Together(usize),
    /// Long prompt `n` of the round, with `max_tokens` 1.
    Prefill(usize),
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
            Target::Http {
                api,
                base,
                model,
                key,
                ..
            } => {
                http::complete(
                    &self.client,
                    *api,
                    base,
                    model,
                    *key,
                    text,
                    tokens.len() as u32,
                    max_tokens,
                )
                .await
            }
        }
    }

    /// One step of round `round` on `target`; every prompt is fresh in this
    /// round, and the same for every contender.
    async fn step(
        &self,
        target: &Target<'_>,
        round: u32,
        step: Step,
        into: &mut Samples,
    ) -> Result<()> {
        match step {
            Step::Alone(n) => {
                let prompt = workload::story_prompt(round + 100, n);
                let start = Instant::now();
                into.streams[0].push(self.one(target, &prompt, self.args.max_tokens).await?);
                into.wall[0] += start.elapsed();
            }
            Step::Together(n) => {
                let start = Instant::now();
                let number = 400 + round * self.args.together + n as u32;
                let batch = futures::future::join_all((0..4).map(|s| {
                    let prompt = workload::story_prompt(number, s);
                    async move { self.one(target, &prompt, self.args.max_tokens).await }
                }))
                .await;
                let wall = start.elapsed();
                into.wall[1] += wall;
                let batch = batch.into_iter().collect::<Result<Vec<_>>>()?;
                into.batches
                    .push(summarise(4, &batch, wall).decode_tokens_per_s);
                into.streams[1].extend(batch);
            }
            Step::Prefill(n) => {
                let prefill = self.args.prefill as usize;
                let prompt = workload::long_prompt(500 + round as usize * prefill + n);
                into.prefill.push(self.one(target, &prompt, 1).await?);
            }
        }
        Ok(())
    }
}

/// What one contender measured over the rounds.
#[derive(Default)]
struct Samples {
    /// Requests at 1 and at 4 concurrent streams.
    streams: [Vec<RequestTiming>; 2],
    /// Wall time of the requests at 1 and at 4 streams.
    wall: [Duration; 2],
    /// Aggregate decode tokens/s of each batch of 4.
    batches: Vec<f64>,
    /// The long prompts.
    prefill: Vec<RequestTiming>,
    /// Decode tokens/s of each round at 1 and at 4 streams.
    rounds: Vec<[f64; 2]>,
}

/// Where a round began in a contender's samples.
struct RoundStart {
    requests: [usize; 2],
    wall: [Duration; 2],
}

impl Samples {
    fn round_start(&self) -> RoundStart {
        RoundStart {
            requests: [self.streams[0].len(), self.streams[1].len()],
            wall: self.wall,
        }
    }

    /// Records the decode rates of the round that began at `start`.
    fn end_round(&mut self, start: &RoundStart) {
        let rate = |i: usize, concurrency: usize| {
            summarise(
                concurrency,
                &self.streams[i][start.requests[i]..],
                self.wall[i] - start.wall[i],
            )
            .decode_tokens_per_s
        };
        let round = [rate(0, 1), rate(1, 4)];
        self.rounds.push(round);
    }

    fn contender(&self, name: &str) -> Contender {
        Contender {
            name: name.into(),
            streams: vec![
                summarise(1, &self.streams[0], self.wall[0]),
                summarise(4, &self.streams[1], self.wall[1]),
            ],
            prefill_tokens_per_s: prefill_rate(&self.prefill),
            prefill_each: self
                .prefill
                .iter()
                .map(|t| prefill_rate(std::slice::from_ref(t)))
                .collect(),
            decode_by_round: self.rounds.clone(),
            decode_c4_each: self.batches.clone(),
        }
    }
}

/// Runs every contender on the same rounds, interleaved step by step: each
/// request alone, each batch of 4 and each long prompt goes to every
/// contender in turn, starting with a different one each time, before the
/// next. Contenders compared are thus measured seconds apart, not a whole
/// round apart, on a machine whose speed moves by 10 to 30 % over minutes.
pub async fn interleaved(
    bench: &Bench<'_>,
    targets: &[(&str, Target<'_>)],
) -> Result<Vec<Contender>> {
    for (name, target) in targets {
        bench
            .one(target, &workload::story_prompt(999, 0), 8)
            .await
            .with_context(|| format!("warm-up request to {name}"))?;
    }
    let mut samples: Vec<Samples> = targets.iter().map(|_| Samples::default()).collect();
    let steps: Vec<Step> = (0..bench.args.alone as usize)
        .map(Step::Alone)
        .chain((0..bench.args.together as usize).map(Step::Together))
        .chain((0..bench.args.prefill as usize).map(Step::Prefill))
        .collect();
    let mut turn = 0;
    for round in 0..bench.args.rounds {
        eprintln!(
            "bench: round {} of {}: {} steps on each of {} contenders",
            round + 1,
            bench.args.rounds,
            steps.len(),
            targets.len()
        );
        let starts: Vec<RoundStart> = samples.iter().map(Samples::round_start).collect();
        for &step in &steps {
            for k in 0..targets.len() {
                let i = (turn + k) % targets.len();
                let (name, target) = &targets[i];
                if let Some(scraper) = target.scraper() {
                    scraper.resume();
                }
                let measured = bench.step(target, round, step, &mut samples[i]).await;
                if let Some(scraper) = target.scraper() {
                    scraper.pause();
                }
                measured.with_context(|| format!("measuring {name}"))?;
            }
            turn += 1;
        }
        for (s, start) in samples.iter_mut().zip(&starts) {
            s.end_round(start);
        }
    }
    Ok(targets
        .iter()
        .zip(&samples)
        .map(|((name, _), s)| s.contender(name))
        .collect())
}
