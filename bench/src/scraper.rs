//! A Prometheus-like poller of a head's `/metrics`, on a thread of its own,
//! that polls only while its contender is being measured: the pair "serve
//! scraped" / "serve" is then the cost of being scraped every 100 ms, and
//! the other contenders never share a core with the poller.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Context, Result};
use serde::Serialize;

/// How often a scraper polls: ten times faster than Prometheus's usual
/// 1 s at its most eager, so a cost that is there shows.
pub const INTERVAL: Duration = Duration::from_millis(100);

/// What the poller did over the run.
#[derive(Debug, Serialize)]
pub struct ScrapeCounts {
    pub interval_ms: u64,
    pub scrapes: u64,
    pub failed: u64,
    pub bytes: u64,
}

#[derive(Default)]
struct Shared {
    active: AtomicBool,
    stop: AtomicBool,
    scrapes: AtomicU64,
    failed: AtomicU64,
    bytes: AtomicU64,
}

/// The poller; stopped and joined on drop.
pub struct Scraper {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Scraper {
    /// Starts a paused poller of `{base}/metrics`.
    pub fn start(base: &str) -> Result<Scraper> {
        let shared = Arc::new(Shared::default());
        let url = format!("{base}/metrics");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let inner = shared.clone();
        let thread = std::thread::Builder::new()
            .name("metrics-scraper".into())
            .spawn(move || runtime.block_on(poll(url, inner)))
            .context("starting the scraper thread")?;
        Ok(Scraper {
            shared,
            thread: Some(thread),
        })
    }

    /// Polls from now on, until [`Scraper::pause`].
    pub fn resume(&self) {
        self.shared.active.store(true, Ordering::SeqCst);
    }

    pub fn pause(&self) {
        self.shared.active.store(false, Ordering::SeqCst);
    }

    pub fn counts(&self) -> ScrapeCounts {
        ScrapeCounts {
            interval_ms: INTERVAL.as_millis() as u64,
            scrapes: self.shared.scrapes.load(Ordering::SeqCst),
            failed: self.shared.failed.load(Ordering::SeqCst),
            bytes: self.shared.bytes.load(Ordering::SeqCst),
        }
    }
}

impl Drop for Scraper {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn poll(url: String, shared: Arc<Shared>) {
    let client = reqwest::Client::new();
    let mut tick = tokio::time::interval(INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while !shared.stop.load(Ordering::SeqCst) {
        tick.tick().await;
        if !shared.active.load(Ordering::SeqCst) {
            continue;
        }
        let body = match client.get(&url).send().await {
            Ok(r) if r.status().is_success() => r.bytes().await.ok(),
            _ => None,
        };
        match body {
            Some(b) => {
                shared.scrapes.fetch_add(1, Ordering::SeqCst);
                shared.bytes.fetch_add(b.len() as u64, Ordering::SeqCst);
            }
            None => {
                shared.failed.fetch_add(1, Ordering::SeqCst);
            }
        }
    }
}
