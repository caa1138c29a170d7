//! The page `GET /metrics` serves, in the Prometheus text format: the
//! head's counters and histograms, each node's gauges read from the fleet
//! at scrape time (`metrics_page/nodes.rs`), and the membership's join
//! refusals.
//!
//! It reads the fleet from above; the counters themselves
//! ([`crate::metrics`]) sit below the fleet, which updates them.

use prometheus::proto::{MetricFamily, MetricType};
use prometheus::TextEncoder;

use crate::fleet::{Fleet, NodeSnapshot};
use crate::metrics::Metrics;

mod nodes;

const JOIN_REFUSALS: &str = "superfluid_join_refusals_total";

/// The content type of the page.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The metrics page for `fleet` as it is now.
pub fn render(fleet: &Fleet) -> String {
    // With a membership, enrolled nodes that are not connected count as down.
    let nodes = match fleet.membership() {
        Some(_) => fleet.roster(),
        None => fleet.nodes(),
    };
    let refusals = fleet.membership().map(|m| m.refusals());
    page(fleet.metrics(), &nodes, refusals.as_deref())
}

/// The metrics page: `metrics`' families, the node families of `nodes`,
/// and the join refusals where the head has a membership.
pub fn page(
    metrics: &Metrics,
    nodes: &[NodeSnapshot],
    join_refusals: Option<&[(&'static str, u64)]>,
) -> String {
    let mut families = metrics.families();
    families.extend(nodes::families(nodes));
    if let Some(refusals) = join_refusals {
        families.push(join_refusal_family(refusals));
    }
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
    names.push(JOIN_REFUSALS.to_owned());
    names.sort();
    names
}

#[cfg(test)]
mod dashboard_tests;
#[cfg(test)]
mod tests;
