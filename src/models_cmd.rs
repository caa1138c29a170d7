//! `superfluid models list|load|unload`: where the fleet's models are
//! loaded, through the head's admin API.

use anyhow::Result;
use serde_json::{json, Value};

use crate::admin_client::{client, text};
use crate::cli::ModelsCommand;

pub async fn run(command: ModelsCommand) -> Result<()> {
    match command {
        ModelsCommand::List { json, admin } => {
            let models = client(admin)?
                .call(reqwest::Method::GET, "/admin/v1/models", None)
                .await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&models)?);
            } else {
                print_table(models.as_array().map_or(&[][..], Vec::as_slice));
            }
        }
        ModelsCommand::Load { model, node, admin } => {
            eprintln!("loading {model}{}…", on(node.as_deref()));
            let answer = client(admin)?
                .call(
                    reqwest::Method::POST,
                    &format!("/admin/v1/models/{model}/load"),
                    Some(json!({"node": node})),
                )
                .await?;
            println!("{model} is loaded on {}", text(&answer["loaded_on"]));
        }
        ModelsCommand::Unload { model, node, admin } => {
            let answer = client(admin)?
                .call(
                    reqwest::Method::POST,
                    &format!("/admin/v1/models/{model}/unload"),
                    Some(json!({"node": node})),
                )
                .await?;
            let told: Vec<String> = answer["unloading_on"]
                .as_array()
                .map(|a| a.iter().map(text).collect())
                .unwrap_or_default();
            if told.is_empty() {
                println!("{model} is not loaded{}", on(node.as_deref()));
            } else {
                println!("unloading {model} from {}", told.join(", "));
            }
        }
    }
    Ok(())
}

fn on(node: Option<&str>) -> String {
    node.map(|n| format!(" on {n}")).unwrap_or_default()
}

/// One line per model: id, size, and where it is loaded.
fn print_table(models: &[Value]) {
    println!("{:<40} {:>9}  LOADED ON", "MODEL", "SIZE");
    for m in models {
        let size_mb = m["size"].as_u64().unwrap_or(0) as f64 / 1e6;
        let nodes: Vec<String> = m["loaded_on"]
            .as_array()
            .map(|a| a.iter().map(|n| text(&n["name"])).collect())
            .unwrap_or_default();
        let loaded = if nodes.is_empty() {
            "-".to_owned()
        } else {
            nodes.join(", ")
        };
        println!("{:<40} {:>6.0} MB  {loaded}", text(&m["id"]), size_mb);
    }
}
