//! One key's record and its usage counters.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::limiter::Limiter;

/// What is known about a key besides its secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRecord {
    /// Its unique name; logs and listings show this, never the secret.
    pub name: String,
    /// When it was made (Unix seconds).
    pub created: u64,
    /// When it stops working (Unix seconds); `None` for never.
    pub expires: Option<u64>,
    /// The models it may use; `None` for all.
    pub models: Option<Vec<String>>,
    /// Requests per minute; `None` for no limit.
    pub rpm: Option<u32>,
    /// Prompt and completion tokens per minute; `None` for no limit.
    pub tpm: Option<u32>,
}

/// A key as the auth layer sees it.
#[derive(Debug)]
pub struct ApiKey {
    /// Name, expiry, models.
    pub record: KeyRecord,
    /// What it has been used for.
    pub usage: KeyUsage,
    /// Its request and token buckets; `None` when it has no limit.
    limiter: Option<Limiter>,
    /// Kept in the key database (not a static `--api-key`).
    stored: bool,
}

impl ApiKey {
    /// A key of the key database, with the usage it had saved.
    pub(super) fn stored_with(record: KeyRecord, usage: UsageSnapshot) -> ApiKey {
        ApiKey {
            limiter: Limiter::new(record.rpm, record.tpm),
            record,
            usage: KeyUsage::from_snapshot(usage),
            stored: true,
        }
    }

    /// A new key of the key database.
    pub(super) fn stored(record: KeyRecord) -> ApiKey {
        Self::stored_with(record, UsageSnapshot::default())
    }

    /// A static key, which lives only in memory and has no limits.
    pub(super) fn fixed(record: KeyRecord) -> ApiKey {
        ApiKey {
            record,
            usage: KeyUsage::default(),
            limiter: None,
            stored: false,
        }
    }

    /// Its limits, if it has any.
    pub fn limiter(&self) -> Option<&Limiter> {
        self.limiter.as_ref()
    }

    /// Whether it is kept in the key database.
    pub fn is_stored(&self) -> bool {
        self.stored
    }

    /// Whether its expiry has passed at `now` (Unix seconds).
    pub fn expired_at(&self, now: u64) -> bool {
        self.record.expires.is_some_and(|e| now >= e)
    }

    /// Whether it may use `model`.
    pub fn allows(&self, model: &str) -> bool {
        self.record
            .models
            .as_ref()
            .is_none_or(|models| models.iter().any(|m| m == model))
    }
}

/// Usage counters, bumped by requests and read by listings and flushes.
#[derive(Debug, Default)]
pub struct KeyUsage {
    requests: AtomicU64,
    prompt_tokens: AtomicU64,
    cached_tokens: AtomicU64,
    completion_tokens: AtomicU64,
    last_used: AtomicU64,
    /// Changed since the last flush.
    dirty: AtomicBool,
}

/// Usage at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UsageSnapshot {
    /// Requests that presented the key.
    pub requests: u64,
    /// Prompt tokens of its generations.
    pub prompt_tokens: u64,
    /// Of those, tokens a node found in its cache.
    pub cached_tokens: u64,
    /// Tokens generated for it.
    pub completion_tokens: u64,
    /// When it was last presented (Unix seconds); `None` if never.
    pub last_used: Option<u64>,
}

impl KeyUsage {
    fn from_snapshot(s: UsageSnapshot) -> KeyUsage {
        KeyUsage {
            requests: AtomicU64::new(s.requests),
            prompt_tokens: AtomicU64::new(s.prompt_tokens),
            cached_tokens: AtomicU64::new(s.cached_tokens),
            completion_tokens: AtomicU64::new(s.completion_tokens),
            last_used: AtomicU64::new(s.last_used.unwrap_or(0)),
            dirty: AtomicBool::new(false),
        }
    }

    /// One request presented the key at `now`.
    pub fn count_request(&self, now: u64) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.last_used.fetch_max(now, Ordering::Relaxed);
        self.dirty.store(true, Ordering::Release);
    }

    /// A generation for the key ended with these token counts.
    pub fn count_tokens(&self, prompt: u64, cached: u64, completion: u64) {
        self.prompt_tokens.fetch_add(prompt, Ordering::Relaxed);
        self.cached_tokens.fetch_add(cached, Ordering::Relaxed);
        self.completion_tokens
            .fetch_add(completion, Ordering::Relaxed);
        self.dirty.store(true, Ordering::Release);
    }

    /// The counters now.
    pub fn snapshot(&self) -> UsageSnapshot {
        let last = self.last_used.load(Ordering::Relaxed);
        UsageSnapshot {
            requests: self.requests.load(Ordering::Relaxed),
            prompt_tokens: self.prompt_tokens.load(Ordering::Relaxed),
            cached_tokens: self.cached_tokens.load(Ordering::Relaxed),
            completion_tokens: self.completion_tokens.load(Ordering::Relaxed),
            last_used: (last != 0).then_some(last),
        }
    }

    /// Whether anything changed since the last call; clears the mark.
    pub(super) fn take_dirty(&self) -> bool {
        self.dirty.swap(false, Ordering::AcqRel)
    }
}
