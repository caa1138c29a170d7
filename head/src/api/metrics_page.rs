//! The page `GET /metrics` serves, in the Prometheus text format: the
//! head's counters and histograms, each node's gauges read from the fleet
//! at scrape time (`metrics_page/nodes.rs`), the membership's join
//! refusals, and usage by API key (`metrics_page/keys.rs`).
//!
//! It reads the fleet from above; the counters themselves
//! ([`crate::metrics`]) sit below the fleet, which updates them.

use prometheus::proto::{MetricFamily, MetricType};
use prometheus::TextEncoder;

use crate::fleet::{Fleet, NodeSnapshot};
use crate::keys::{KeyRecord, Keys, UsageSnapshot};
use crate::metrics::Metrics;

mod keys;
mod nodes;

const JOIN_REFUSALS: &str = "superfluid_join_refusals_total";

/// The content type of the page.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// What the page reads at scrape time, besides the counters.
#[derive(Debug, Clone, Copy, Default)]
pub struct Scraped<'a> {
    /// The connected nodes, and the enrolled ones that are down.
    pub nodes: &'a [NodeSnapshot],
    /// The membership's refusals by reason; `None` without a membership.
    pub join_refusals: Option<&'a [(&'static str, u64)]>,
    /// The named API keys and their usage.
    pub key_usage: &'a [(KeyRecord, UsageSnapshot)],
}

/// The metrics page for `fleet` and `keys` as they are now.
pub fn render(fleet: &Fleet, keys: &Keys) -> String {
    // With a membership, enrolled nodes that are not connected count as down.
    let nodes = match fleet.membership() {
        Some(_) => fleet.roster(),
        None => fleet.nodes(),
    };
    let refusals = fleet.membership().map(|m| m.refusals());
    let key_usage = keys.list();
    let scraped = Scraped {
        nodes: &nodes,
        join_refusals: refusals.as_deref(),
        key_usage: &key_usage,
    };
    page(fleet.metrics(), scraped)
}

/// The metrics page: `metrics`' families, then what was `scraped`.
pub fn page(metrics: &Metrics, scraped: Scraped<'_>) -> String {
    let mut families = metrics.families();
    families.extend(nodes::families(scraped.nodes));
    if let Some(refusals) = scraped.join_refusals {
        families.push(join_refusal_family(refusals));
    }
    families.extend(keys::families(scraped.key_usage));
    families.sort_by(|a, b| a.name().cmp(b.name()));
    let mut out = String::with_capacity(16 * 1024);
    if let Err(e) = TextEncoder::new().encode_utf8(&families, &mut out) {
        // Only a family without samples fails, and none is passed; say so
        // on the page rather than answer nothing.
        tracing::warn!(error = %e, "could not write the metrics page");
        out.push_str(&format!("# could not write every family: {e}\n"));
    }
    out
}

fn join_refusal_family(refusals: &[(&'static str, u64)]) -> MetricFamily {
    let samples = refusals
        .iter()
        .map(|(reason, n)| nodes::counter_sample(&[("reason", reason)], *n as f64))
        .collect();
    nodes::family(
        JOIN_REFUSALS,
        "Nodes the membership refused to admit, by reason (bad or expired token, revoked key, a key already connected, ...).",
        MetricType::COUNTER,
        samples,
    )
}

/// The name of every family the head can export, whether or not it has a
/// sample now. A dashboard may query only these.
pub fn exported_names() -> Vec<String> {
    let mut names = Metrics::default().names();
    names.extend(nodes::names().map(str::to_owned));
    names.extend(keys::names().map(str::to_owned));
    names.push(JOIN_REFUSALS.to_owned());
    names.sort();
    names
}

#[cfg(test)]
mod dashboard_tests;
#[cfg(test)]
mod tests;
