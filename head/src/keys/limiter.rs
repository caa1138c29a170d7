//! Per-key request and token limits: one token bucket for each limit a key
//! has, holding at most a minute's worth and refilled continuously.
//!
//! A request is admitted while the request bucket holds a whole request and
//! the token bucket is not negative. Tokens are debited when they become
//! known (the prompt at admission, the completion when the generation ends),
//! so one long generation may overdraw the token bucket; the key's next
//! requests then wait until it has refilled to zero. Counting tokens before
//! the node has produced them would mean refusing on a guess.
//!
//! Nothing here reads the clock: callers pass `now` (`tokio::time::Instant`,
//! the head's one clock), and the tests drive it with explicit instants.
//! Levels are kept in millionths of a request or token, so that a minute
//! splits into exact steps and a driven clock gives exact answers.

use std::sync::Mutex;
use std::time::Duration;
use superfluid_link::sync::lock;

use tokio::time::Instant;

#[cfg(test)]
mod tests;

/// Millionths of a request or token in one.
const MICROS: i64 = 1_000_000;

/// Nanoseconds in the minute a limit is counted over.
const MINUTE_NANOS: i128 = 60_000_000_000;

/// Which limit a refused request ran into; OpenAI's error `type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitKind {
    /// Requests per minute.
    Requests,
    /// Tokens (prompt and completion) per minute.
    Tokens,
}

impl LimitKind {
    /// The word OpenAI uses for it in error types and header names.
    pub fn as_str(self) -> &'static str {
        match self {
            LimitKind::Requests => "requests",
            LimitKind::Tokens => "tokens",
        }
    }
}

/// One limit's state as a response reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Remaining {
    /// The limit per minute.
    pub limit: u32,
    /// What could be used now (never below zero).
    pub remaining: u64,
    /// How long until the bucket is full again.
    pub reset: Duration,
}

/// The state of a key's limits at one moment; `None` for a limit it lacks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Quota {
    /// Requests per minute.
    pub requests: Option<Remaining>,
    /// Tokens per minute.
    pub tokens: Option<Remaining>,
}

/// A request refused for a limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limited {
    /// The limit it ran into.
    pub kind: LimitKind,
    /// That limit's value per minute.
    pub limit: u32,
    /// How long until a request would be admitted.
    pub retry_after: Duration,
    /// The key's limits when it was refused.
    pub quota: Quota,
}

/// A bucket that holds up to `limit` and refills `limit` per minute.
#[derive(Debug, Clone)]
struct Bucket {
    limit: u32,
    /// In millionths; below zero once tokens overdraw it.
    level: i64,
    /// When `level` was last brought up to date; `None` until first used,
    /// so a bucket needs no clock to be made and starts full.
    at: Option<Instant>,
}

impl Bucket {
    fn full(limit: u32) -> Bucket {
        Bucket {
            limit,
            level: capacity(limit),
            at: None,
        }
    }

    fn refill(&mut self, now: Instant) {
        if let Some(at) = self.at {
            if now <= at {
                // Instants taken on other threads may arrive out of order;
                // time never runs backwards for the bucket.
                return;
            }
            let nanos = i128::try_from((now - at).as_nanos()).unwrap_or(i128::MAX);
            let gained = i128::from(self.limit)
                .saturating_mul(nanos)
                .saturating_mul(i128::from(MICROS))
                / MINUTE_NANOS;
            let level = i128::from(self.level).saturating_add(gained);
            self.level =
                i64::try_from(level.min(i128::from(capacity(self.limit)))).unwrap_or(i64::MAX);
        }
        self.at = Some(now);
    }

    fn take(&mut self, units: u64) {
        let micros = i64::try_from(units)
            .unwrap_or(i64::MAX)
            .saturating_mul(MICROS);
        self.level = self.level.saturating_sub(micros);
    }

    /// How long until the level reaches `target` millionths.
    fn time_to(&self, target: i64) -> Duration {
        let missing = i128::from(target) - i128::from(self.level);
        if missing <= 0 || self.limit == 0 {
            return Duration::ZERO;
        }
        let per = i128::from(self.limit) * i128::from(MICROS);
        let nanos = (missing * MINUTE_NANOS + per - 1) / per;
        Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }

    fn remaining(&self) -> Remaining {
        Remaining {
            limit: self.limit,
            remaining: u64::try_from(self.level.max(0) / MICROS).unwrap_or(0),
            reset: self.time_to(capacity(self.limit)),
        }
    }
}

fn capacity(limit: u32) -> i64 {
    i64::from(limit) * MICROS
}

/// A key's limits. Each key has its own, so keys never wait on each other.
#[derive(Debug)]
pub struct Limiter {
    buckets: Mutex<Buckets>,
}

#[derive(Debug)]
struct Buckets {
    requests: Option<Bucket>,
    tokens: Option<Bucket>,
}

impl Limiter {
    /// The limiter of a key with these limits per minute; `None` if it has
    /// none.
    pub fn new(rpm: Option<u32>, tpm: Option<u32>) -> Option<Limiter> {
        if rpm.is_none() && tpm.is_none() {
            return None;
        }
        Some(Limiter {
            buckets: Mutex::new(Buckets {
                requests: rpm.map(Bucket::full),
                tokens: tpm.map(Bucket::full),
            }),
        })
    }

    /// Admits one request at `now` and takes it from the request bucket, or
    /// says which limit refuses it and for how long.
    pub fn admit(&self, now: Instant) -> Result<Quota, Limited> {
        let mut b = self.lock();
        b.refill(now);
        if let Some(requests) = &b.requests {
            if requests.level < MICROS {
                return Err(Limited {
                    kind: LimitKind::Requests,
                    limit: requests.limit,
                    retry_after: requests.time_to(MICROS),
                    quota: b.quota(),
                });
            }
        }
        if let Some(tokens) = &b.tokens {
            if tokens.level < 0 {
                return Err(Limited {
                    kind: LimitKind::Tokens,
                    limit: tokens.limit,
                    retry_after: tokens.time_to(0),
                    quota: b.quota(),
                });
            }
        }
        if let Some(requests) = &mut b.requests {
            requests.take(1);
        }
        Ok(b.quota())
    }

    /// Debits `tokens` used at `now` from the token bucket, if the key has
    /// one; it may go below zero.
    pub fn debit_tokens(&self, tokens: u64, now: Instant) {
        let mut b = self.lock();
        b.refill(now);
        if let Some(bucket) = &mut b.tokens {
            bucket.take(tokens);
        }
    }

    /// The key's limits at `now`.
    pub fn quota(&self, now: Instant) -> Quota {
        let mut b = self.lock();
        b.refill(now);
        b.quota()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Buckets> {
        lock(&self.buckets)
    }
}

impl Buckets {
    fn refill(&mut self, now: Instant) {
        for bucket in [&mut self.requests, &mut self.tokens].into_iter().flatten() {
            bucket.refill(now);
        }
    }

    fn quota(&self) -> Quota {
        Quota {
            requests: self.requests.as_ref().map(Bucket::remaining),
            tokens: self.tokens.as_ref().map(Bucket::remaining),
        }
    }
}

/// `d` in whole seconds, rounded up, as `Retry-After` takes it; at least 1,
/// since a refused request cannot pass at once.
pub fn whole_seconds_up(d: Duration) -> u64 {
    let secs = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    secs.max(1)
}

/// `d` as OpenAI writes its `x-ratelimit-reset-*` headers (Go's duration
/// format, to the millisecond, rounded up): `120ms`, `1s`, `17.28s`, `6m0s`.
pub fn format_reset(d: Duration) -> String {
    let ms = d.as_nanos().div_ceil(1_000_000);
    if ms == 0 {
        return "0s".to_owned();
    }
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let (hours, rest) = (ms / 3_600_000, ms % 3_600_000);
    let (minutes, rest) = (rest / 60_000, rest % 60_000);
    let (secs, frac) = (rest / 1000, rest % 1000);
    let mut seconds = secs.to_string();
    if frac > 0 {
        let digits = format!("{frac:03}");
        seconds.push('.');
        seconds.push_str(digits.trim_end_matches('0'));
    }
    if hours > 0 {
        format!("{hours}h{minutes}m{seconds}s")
    } else if minutes > 0 {
        format!("{minutes}m{seconds}s")
    } else {
        format!("{seconds}s")
    }
}
