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
    /// Each request's time to first token, in the order sent.
    #[serde(skip)]
    pub ttft_ms: Vec<f64>,
    /// Each request's decode tokens/s (tokens after the first over the
    /// time they took), in the order sent.
    #[serde(skip)]
    pub decode_each: Vec<f64>,
}

/// The quartiles of a set of ratios.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Spread {
    pub p25: f64,
    pub p50: f64,
    pub p75: f64,
    /// Ratios the quartiles are of.
    pub n: usize,
}

impl Spread {
    /// The quartiles of `of[i] / to[i]` over the pairs both measured.
    pub fn of_ratios(of: &[f64], to: &[f64]) -> Spread {
        let mut ratios: Vec<f64> = of
            .iter()
            .zip(to)
            .filter(|(_, b)| **b > 0.0)
            .map(|(a, b)| a / b)
            .collect();
        Spread {
            p25: percentile(&mut ratios, 0.25),
            p50: percentile(&mut ratios, 0.5),
            p75: percentile(&mut ratios, 0.75),
            n: ratios.len(),
        }
    }
}

fn decode_rate(t: &RequestTiming) -> f64 {
    f64::from(t.tokens.saturating_sub(1)) / t.decode.as_secs_f64().max(1e-9)
}

/// Summarises requests that ran `concurrency` at a time over `wall` in all.
pub fn summarise(concurrency: usize, timings: &[RequestTiming], wall: Duration) -> Summary {
    let ttft_ms: Vec<f64> = timings.iter().map(|t| t.ttft.as_secs_f64() * 1e3).collect();
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
        ttft_p50_ms: percentile(&mut ttft_ms.clone(), 0.5),
        requests: timings.len(),
        ttft_ms,
        decode_each: timings.iter().map(decode_rate).collect(),
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

/// The median of `of[i] - to[i]`: what `of` adds to each request that both
/// ran, free of the spread between requests (prompt lengths, the machine's
/// moments) that a difference of two medians carries. 0 without pairs.
pub fn paired_median_difference(of: &[f64], to: &[f64]) -> f64 {
    let mut differences: Vec<f64> = of.iter().zip(to).map(|(a, b)| a - b).collect();
    percentile(&mut differences, 0.5)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_paired_difference_sees_a_constant_overhead_under_a_wide_spread() {
        let to = [30.0, 90.0, 31.0, 88.0, 45.0];
        let of: Vec<f64> = to.iter().map(|t| t + 2.0).collect();
        assert_eq!(paired_median_difference(&of, &to), 2.0);
        // One request that stalled and one that got lucky move the medians
        // apart by far more than the overhead; the paired median stays put.
        let of = [32.0, 92.0, 81.0, 90.0, 5.0];
        assert_eq!(
            percentile(&mut of.clone(), 0.5) - percentile(&mut to.clone(), 0.5),
            36.0
        );
        assert_eq!(paired_median_difference(&of, &to), 2.0);
        assert_eq!(paired_median_difference(&[], &[]), 0.0);
    }

    #[test]
    fn paired_ratios_see_a_constant_factor_on_a_machine_that_drifts() {
        // The machine's speed moves by 2x between pairs; each pair ran
        // close together, so each ratio is 0.9.
        let to = [100.0, 50.0, 80.0, 120.0];
        let of: Vec<f64> = to.iter().map(|t| t * 0.9).collect();
        let spread = Spread::of_ratios(&of, &to);
        assert!((spread.p50 - 0.9).abs() < 1e-9, "{spread:?}");
        assert!((spread.p75 - spread.p25).abs() < 1e-9, "{spread:?}");
        assert_eq!(spread.n, 4);
        // A pair with nothing measured on the baseline side is left out.
        assert_eq!(Spread::of_ratios(&[1.0, 2.0], &[0.0, 2.0]).n, 1);
    }
}
