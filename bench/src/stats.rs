//! What one run of a workload measured, and its summary.

use serde::Serialize;
use std::time::Duration;

/// One request's timings, measured by the caller.
#[derive(Debug, Clone, Copy)]
pub struct RequestTiming {
    /// From sending the request to the first generated text.
    pub ttft: Duration,
    /// From the first generated text to the last.
    pub decode: Duration,
    /// Tokens generated.
    pub tokens: u32,
    /// Tokens in the prompt.
    pub prompt_tokens: u32,
}

/// A summary of one contender at one concurrency.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// Streams run at once.
    pub concurrency: usize,
    /// Tokens/s per stream at concurrency 1; aggregate over all streams otherwise.
    pub decode_tokens_per_s: f64,
    /// Median time to first token.
    pub ttft_p50_ms: f64,
    /// Requests measured.
    pub requests: usize,
}

/// Summarises requests that ran `concurrency` at a time over `wall` in all.
pub fn summarise(concurrency: usize, timings: &[RequestTiming], wall: Duration) -> Summary {
    let mut ttft: Vec<f64> = timings.iter().map(|t| t.ttft.as_secs_f64() * 1e3).collect();
    let decode_tokens_per_s = if concurrency == 1 {
        // Per stream: tokens after the first over the time they took.
        let tokens: u32 = timings.iter().map(|t| t.tokens.saturating_sub(1)).sum();
        let secs: f64 = timings.iter().map(|t| t.decode.as_secs_f64()).sum();
        f64::from(tokens) / secs.max(1e-9)
    } else {
        let tokens: u32 = timings.iter().map(|t| t.tokens).sum();
        f64::from(tokens) / wall.as_secs_f64().max(1e-9)
    };
    Summary {
        concurrency,
        decode_tokens_per_s,
        ttft_p50_ms: percentile(&mut ttft, 0.5),
        requests: timings.len(),
    }
}

/// Prompt tokens per second of prefill: prompt tokens over time to first token.
pub fn prefill_rate(timings: &[RequestTiming]) -> f64 {
    let tokens: u32 = timings.iter().map(|t| t.prompt_tokens).sum();
    let secs: f64 = timings.iter().map(|t| t.ttft.as_secs_f64()).sum();
    f64::from(tokens) / secs.max(1e-9)
}

/// The `q` quantile (0..=1) by nearest rank; 0 for no samples.
pub fn percentile(samples: &mut [f64], q: f64) -> f64 {
    if samples.is_empty() {
        return 0.0;
    }
    samples.sort_by(f64::total_cmp);
    let rank = ((samples.len() - 1) as f64 * q).round() as usize;
    samples[rank.min(samples.len() - 1)]
}
