//! The Grafana dashboard in `docs/grafana/superfluid-fleet.json` queries
//! only metrics the head exports, and imports with a Prometheus data
//! source chosen at import.

use super::exported_names;
use serde_json::Value;

fn dashboard() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../docs/grafana/superfluid-fleet.json"
    );
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path} is not JSON: {e}"))
}

/// Every PromQL query in the dashboard, with where it is: panel targets
/// and template variables.
fn queries(dashboard: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for panel in dashboard["panels"].as_array().into_iter().flatten() {
        let title = panel["title"].as_str().unwrap_or("?");
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().unwrap_or_default();
            out.push((format!("panel {title:?}"), expr.to_owned()));
        }
    }
    for var in dashboard["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let name = var["name"].as_str().unwrap_or("?");
        let query = var["query"]["query"].as_str().unwrap_or_default();
        out.push((format!("variable {name:?}"), query.to_owned()));
    }
    out
}

/// The metric names `expr` mentions: its words with the project's prefix.
/// A histogram's series count as the histogram.
fn metric_names(expr: &str, exported: &[String]) -> Vec<String> {
    expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .filter(|word| word.starts_with("superfluid_"))
        .map(|word| {
            ["_bucket", "_sum", "_count"]
                .iter()
                .filter_map(|suffix| word.strip_suffix(suffix))
                .find(|base| exported.iter().any(|n| n == base))
                .unwrap_or(word)
                .to_owned()
        })
        .collect()
}

#[test]
fn every_dashboard_query_names_only_metrics_the_head_exports() {
    let dashboard = dashboard();
    let exported = exported_names();
    let queries = queries(&dashboard);
    assert!(
        queries.len() > 20,
        "the dashboard has {} queries",
        queries.len()
    );
    for (place, expr) in queries {
        let names = metric_names(&expr, &exported);
        assert!(
            !names.is_empty(),
            "{place} queries no superfluid metric: {expr}"
        );
        for name in names {
            assert!(
                exported.contains(&name),
                "{place} queries {name}, which the head does not export: {expr}"
            );
        }
    }
}

#[test]
fn the_dashboard_asks_for_its_prometheus_data_source_at_import() {
    let dashboard = dashboard();
    let input = &dashboard["__inputs"][0];
    assert_eq!(input["name"], "DS_PROMETHEUS");
    assert_eq!(input["pluginId"], "prometheus");
    for panel in dashboard["panels"].as_array().into_iter().flatten() {
        if panel["type"] == "row" {
            continue;
        }
        assert_eq!(
            panel["datasource"]["uid"], "${DS_PROMETHEUS}",
            "panel {}",
            panel["title"]
        );
    }
}

#[test]
fn a_histogram_series_counts_as_its_histogram_and_a_typo_does_not() {
    let exported = exported_names();
    let names = metric_names(
        "histogram_quantile(0.9, sum by (le) (rate(superfluid_time_to_first_token_seconds_bucket[5m]))) + superfluid_nodse",
        &exported,
    );
    assert_eq!(
        names,
        ["superfluid_time_to_first_token_seconds", "superfluid_nodse"]
    );
    assert!(!exported.contains(&names[1]));
}
