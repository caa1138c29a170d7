//! `superfluid fleet token|nodes|revoke|drain`: the head's admin API from
//! the command line.

use anyhow::Result;
use serde_json::Value;

use crate::admin_client::{client, text};
use crate::cli::FleetCommand;
use crate::node_cmd::{self, Join};

pub async fn run(command: FleetCommand) -> Result<()> {
    match command {
        FleetCommand::Token {
            ttl,
            uses,
            labels,
            admin,
        } => {
            println!("{}", client(admin)?.mint(ttl, uses, &labels).await?);
        }
        FleetCommand::Join {
            token,
            data_dir,
            name,
            no_run,
            no_mdns,
            metrics,
            logs: _,
            engine,
        } => {
            node_cmd::join(Join {
                token,
                data_dir,
                name,
                no_run,
                no_mdns,
                metrics,
                engine,
            })
            .await?;
        }
        FleetCommand::Nodes { json, admin } => {
            let nodes = client(admin)?.nodes().await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&nodes)?);
            } else {
                print_table(&nodes);
            }
        }
        FleetCommand::Revoke { node, admin } => {
            let revoked = client(admin)?.revoke(&node).await?;
            println!(
                "revoked {} (key {})",
                text(&revoked["name"]),
                text(&revoked["fingerprint"])
            );
        }
        FleetCommand::Drain { node, admin } => {
            let drained = client(admin)?.drain(&node).await?;
            println!(
                "draining {} ({}): no new work goes there",
                text(&drained["name"]),
                text(&drained["id"])
            );
        }
    }
    Ok(())
}

/// A model as the table shows it: its id, and its KV cache's type and size
/// when the node reported them (`smollm2 q8_0 24M`).
fn model_cell(m: &Value) -> String {
    let id = text(&m["id"]);
    match (m["kv_cache_type"].as_str(), m["kv_bytes"].as_u64()) {
        (Some(kind), Some(bytes)) if !kind.is_empty() => {
            format!("{id} {kind} {}M", bytes.div_ceil(1 << 20))
        }
        _ => id,
    }
}

/// A measured rate, rounded; `-` until the node has measured it.
fn rate(v: &Value) -> String {
    v.as_f64().map_or_else(|| "-".into(), |r| format!("{r:.0}"))
}

fn ago(v: &Value) -> String {
    let Some(then) = v.as_u64() else {
        return "-".into();
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(then);
    format!("{}s ago", now.saturating_sub(then))
}

fn print_table(nodes: &[Value]) {
    println!(
        "{:<8} {:<16} {:<22} {:<32} {:>5} {:>4} {:>5} {:>6} {:>9} {:>8} {:<9} {:<12} {:<12} {:>6}",
        "ID",
        "NAME",
        "ADDRESS",
        "MODELS",
        "BUSY",
        "RUN",
        "QUEUE",
        "CTX",
        "PREFILL/s",
        "DECODE/s",
        "STATE",
        "CONNECTED",
        "HEARTBEAT",
        "SERVED"
    );
    for n in nodes {
        let models: Vec<String> = n["models"]
            .as_array()
            .map(|ms| ms.iter().map(model_cell).collect())
            .unwrap_or_default();
        println!(
            "{:<8} {:<16} {:<22} {:<32} {:>5} {:>4} {:>5} {:>6} {:>9} {:>8} {:<9} {:<12} {:<12} {:>6}",
            text(&n["id"]),
            text(&n["name"]),
            text(&n["address"]),
            if models.is_empty() {
                "-".into()
            } else {
                models.join(",")
            },
            format!("{}/{}", text(&n["busy_slots"]), text(&n["slots"])),
            text(&n["in_flight"]),
            text(&n["queued"]),
            text(&n["context"]),
            rate(&n["prefill_tokens_per_sec"]),
            rate(&n["decode_tokens_per_sec"]),
            text(&n["state"]),
            ago(&n["connected_since"]),
            ago(&n["last_heartbeat"]),
            text(&n["served"]),
        );
        if let Some(hardware) = n["hardware"].as_str().filter(|h| !h.is_empty()) {
            println!("         {hardware}");
        }
        if let Some(model) = n["fetching"]["model"].as_str() {
            println!(
                "         fetching {model} {}% ({} of {} MB)",
                text(&n["fetching"]["percent"]),
                n["fetching"]["done"].as_u64().unwrap_or(0) / 1_000_000,
                n["fetching"]["total"].as_u64().unwrap_or(0) / 1_000_000
            );
        }
        if let Some(why) = n["ineligible"].as_str() {
            println!("         gets no work: {why}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::model_cell;
    use serde_json::json;

    #[test]
    fn a_model_shows_its_kv_cache_when_the_node_reported_it() {
        let reported = json!({"id": "smollm2", "kv_cache_type": "q8_0", "kv_bytes": 25_067_520});
        assert_eq!(model_cell(&reported), "smollm2 q8_0 24M");
        let older = json!({"id": "smollm2"});
        assert_eq!(model_cell(&older), "smollm2");
        let embedding = json!({"id": "minilm", "kv_cache_type": "", "kv_bytes": 0});
        assert_eq!(model_cell(&embedding), "minilm");
    }
}
