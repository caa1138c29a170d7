//! A generation's latencies as the client sees them, observed into its
//! model's histograms: queue wait, time to first token, the time between
//! tokens, and the whole request.
//!
//! Every time counts from the request's arrival at the head, and each is
//! observed when the head learns it, before the client can read the text
//! it concerns: a scrape after a whole answer sees all of them.

use std::time::Instant;

use crate::metrics::Latency;

/// The clock of one generation.
#[derive(Debug)]
pub struct Timing {
    /// `None` where nothing is measured (a generation from a script).
    latency: Option<Latency>,
    received: Instant,
    last_tokens: Option<Instant>,
    ended: bool,
}

impl Timing {
    /// A generation of a request that arrived at `received`, observed into
    /// `latency`.
    pub fn new(latency: Option<Latency>, received: Instant) -> Timing {
        Timing {
            latency,
            received,
            last_tokens: None,
            ended: false,
        }
    }

    /// A node's stream carries the generation now.
    pub fn dispatched(&self) {
        if let Some(latency) = &self.latency {
            latency.queue.observe(self.received.elapsed().as_secs_f64());
        }
    }

    /// `n` tokens arrived together. The first token observes the time to
    /// first token; each later one the time since the tokens before it,
    /// shared among the tokens that arrived together (tokens arriving with
    /// the first count 0), so that a generation of `n` tokens observes
    /// `n - 1` gaps.
    pub fn tokens(&mut self, n: usize) {
        if n == 0 {
            return;
        }
        let now = Instant::now();
        let Some(latency) = &self.latency else {
            self.last_tokens = Some(now);
            return;
        };
        let (gaps, gap) = match self.last_tokens {
            None => {
                latency
                    .ttft
                    .observe(now.duration_since(self.received).as_secs_f64());
                (n.saturating_sub(1), 0.0)
            }
            Some(last) => (n, now.duration_since(last).as_secs_f64() / n as f64),
        };
        for _ in 0..gaps {
            latency.inter_token.observe(gap);
        }
        self.last_tokens = Some(now);
    }

    /// The generation ended (finished, stopped, failed or abandoned); only
    /// the first call observes its duration.
    pub fn end(&mut self) {
        if self.ended {
            return;
        }
        self.ended = true;
        if let Some(latency) = &self.latency {
            latency
                .duration
                .observe(self.received.elapsed().as_secs_f64());
        }
    }
}

#[cfg(test)]
mod tests;
