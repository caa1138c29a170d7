//! `bench serve`'s KV-cache step: three `superfluid serve`s of the same
//! model, their KV caches in f16 (llama.cpp's default), q8_0 and q4_0,
//! sent the same greedy chat requests in turn, the order rotating; decode
//! tokens/s of each quantized cache against f16's, paired request by
//! request, and the KV bytes each node reports on `/v1/fleet`.

use anyhow::{Context, Result};
use serde::Serialize;
use serde_json::Value;

use crate::apis::Api;
use crate::contenders::serve_args;
use crate::http::{self, ServerProcess};
use crate::stats::{RequestTiming, Spread};
use crate::structured::{decode_rate, MIN_TOKENS};
use crate::ServeArgs;

/// The cache types compared, the baseline first.
pub const TYPES: [&str; 3] = ["f16", "q8_0", "q4_0"];

/// What the KV-cache step measured.
#[derive(Debug, Serialize)]
pub struct KvCacheReport {
    /// Prompts sent to each server.
    pub requests: usize,
    /// Per cache type, in [`TYPES`]' order.
    pub types: Vec<KvCacheSide>,
    /// The quartiles of q8_0 / f16 and q4_0 / f16 decode tokens/s, request
    /// by request (replies under 8 tokens on either side left out).
    pub q8_0_over_f16: Spread,
    pub q4_0_over_f16: Spread,
}

/// One server's figures.
#[derive(Debug, Serialize)]
pub struct KvCacheSide {
    /// `--kv-cache-type`.
    pub kv_cache_type: String,
    /// The KV bytes its node reports for the model on `/v1/fleet`.
    pub kv_bytes: u64,
    /// Decode tokens/s over all its replies.
    pub decode_tokens_per_s: f64,
}

/// The prompt of request `n` of round `round`: fresh in every round.
fn prompt(round: u32, n: usize) -> String {
    format!("Story {round}-{n}. Tell a short story about a lighthouse keeper who finds a message in a bottle.")
}

/// The KV bytes `/v1/fleet` shows for the first model of the first node.
async fn kv_bytes(client: &reqwest::Client, server: &ServerProcess) -> Result<u64> {
    let fleet: Value = client
        .get(format!("{}/v1/fleet", server.base))
        .send()
        .await?
        .json()
        .await?;
    fleet["nodes"][0]["model_memory"][0]["kv_bytes"]
        .as_u64()
        .context("no kv_bytes in /v1/fleet's first node")
}

/// Summarises each server's timings (the same prompts, in the same order).
pub fn summarise(timings: &[Vec<RequestTiming>; 3], kv: [u64; 3]) -> KvCacheReport {
    let kept: Vec<usize> = (0..timings[0].len())
        .filter(|&i| timings.iter().all(|t| t[i].tokens >= MIN_TOKENS))
        .collect();
    let rates = |side: usize| -> Vec<f64> {
        kept.iter()
            .map(|&i| decode_rate(&timings[side][i]))
            .collect()
    };
    let overall = |t: &[RequestTiming]| {
        let tokens: u32 = t.iter().map(|t| t.tokens.saturating_sub(1)).sum();
        let secs: f64 = t.iter().map(|t| t.decode.as_secs_f64()).sum();
        f64::from(tokens) / secs.max(1e-9)
    };
    KvCacheReport {
        requests: timings[0].len(),
        types: TYPES
            .iter()
            .zip(timings)
            .zip(kv)
            .map(|((t, timings), kv_bytes)| KvCacheSide {
                kv_cache_type: (*t).to_owned(),
                kv_bytes,
                decode_tokens_per_s: overall(timings),
            })
            .collect(),
        q8_0_over_f16: Spread::of_ratios(&rates(1), &rates(0)),
        q4_0_over_f16: Spread::of_ratios(&rates(2), &rates(0)),
    }
}

/// Starts the three servers and sends `--alone` prompts per round to each.
pub async fn run(args: &ServeArgs, client: &reqwest::Client) -> Result<KvCacheReport> {
    let mut servers = Vec::new();
    for t in TYPES {
        let mut serve = serve_args(args, None);
        serve.extend(["--kv-cache-type".to_owned(), t.to_owned()]);
        let server = http::start(&args.superfluid, &serve)
            .await
            .with_context(|| format!("starting superfluid serve --kv-cache-type {t}"))?;
        servers.push(server);
    }
    let model = superfluid_proto::model_id_from_path(&args.model);
    let send = |side: usize, prompt: String| {
        let (path, body) = Api::OpenAiChat.request(&model, &prompt, args.max_tokens);
        let url = format!("{}{path}", servers[side].base);
        async move {
            http::stream(client, Api::OpenAiChat, &url, &body, None)
                .await
                .with_context(|| format!("KV cache {}", TYPES[side]))
        }
    };
    for side in 0..TYPES.len() {
        send(side, prompt(999, side)).await?;
    }
    let mut timings: [Vec<RequestTiming>; 3] = Default::default();
    for round in 0..args.rounds {
        eprintln!(
            "bench: KV cache types, round {} of {}: {} prompts to each of f16, q8_0, q4_0",
            round + 1,
            args.rounds,
            args.alone
        );
        for n in 0..args.alone as usize {
            let text = prompt(round + 100, n);
            for k in 0..TYPES.len() {
                let side = (k + n + round as usize) % TYPES.len();
                let reply = send(side, text.clone()).await?;
                timings[side].push(reply.timing);
            }
        }
    }
    let mut kv = [0; 3];
    for (side, server) in servers.iter().enumerate() {
        kv[side] = kv_bytes(client, server).await?;
    }
    Ok(summarise(&timings, kv))
}

/// The step's lines of `bench serve`'s table.
pub fn print_table(r: &KvCacheReport) {
    for side in &r.types {
        println!(
            "KV cache {}: {:.1} MiB, decode {:.1} tok/s",
            side.kv_cache_type,
            side.kv_bytes as f64 / f64::from(1 << 20),
            side.decode_tokens_per_s
        );
    }
    for (name, p) in [("q8_0", &r.q8_0_over_f16), ("q4_0", &r.q4_0_over_f16)] {
        println!(
            "KV {name} / f16: paired decode x{:.3} (quartiles x{:.3} to x{:.3}, {} pairs of {})",
            p.p50, p.p25, p.p75, p.n, r.requests
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn timing(tokens: u32, decode_ms: u64) -> RequestTiming {
        RequestTiming {
            ttft: Duration::from_millis(50),
            decode: Duration::from_millis(decode_ms),
            tokens,
            prompt_tokens: 0,
        }
    }

    #[test]
    fn each_quantized_cache_is_paired_with_f16_and_short_replies_left_out() {
        // f16: 101 tokens in 1 s; q8_0 in 0.8 s; q4_0 in 2 s.
        let f16 = vec![timing(101, 1000), timing(101, 1000), timing(3, 10)];
        let q8 = vec![timing(101, 800), timing(101, 800), timing(101, 800)];
        let q4 = vec![timing(101, 2000), timing(101, 2000), timing(101, 2000)];
        let report = summarise(&[f16, q8, q4], [100, 53, 28]);
        assert_eq!(report.requests, 3);
        assert_eq!(report.q8_0_over_f16.n, 2);
        assert!((report.q8_0_over_f16.p50 - 1.25).abs() < 1e-9, "{report:?}");
        assert!((report.q4_0_over_f16.p50 - 0.5).abs() < 1e-9, "{report:?}");
        assert_eq!(report.types[1].kv_cache_type, "q8_0");
        assert_eq!(report.types[2].kv_bytes, 28);
    }
}
