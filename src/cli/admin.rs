//! The flags of the commands that talk to a running head's admin API:
//! `fleet` and `keys`, and the duration and label values they take.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};

use super::EngineFlags;
use crate::logging::LogFlags;

/// How to reach a head's admin API.
#[derive(Debug, Args)]
pub struct AdminFlags {
    /// The head's HTTP address.
    #[arg(long, env = "SUPERFLUID_URL", default_value = "http://127.0.0.1:7700")]
    pub url: String,
    /// The head's data dir, to read its admin key [default: $SUPERFLUID_HOME/head].
    #[arg(long, env = "SUPERFLUID_HEAD_DIR")]
    pub data_dir: Option<PathBuf>,
    /// The admin key (instead of reading it from the data dir).
    #[arg(long, env = "SUPERFLUID_ADMIN_KEY", hide_env_values = true)]
    pub admin_key: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum FleetCommand {
    /// Print a join token for a new node (one line).
    Token {
        /// How long the token stays valid (e.g. 30m, 1h, 2d).
        #[arg(long, default_value = "1h", value_parser = parse_duration)]
        ttl: Duration,
        /// How many nodes may join with it.
        #[arg(long, default_value_t = 1)]
        uses: u32,
        /// A label for the nodes that join with it (repeatable).
        #[arg(long = "label", value_parser = parse_label)]
        labels: Vec<(String, String)>,
        #[command(flatten)]
        admin: AdminFlags,
    },
    /// Join a fleet with a token from `fleet token`, then run as its node.
    Join {
        /// The join token.
        token: String,
        /// The node's data dir [default: $SUPERFLUID_HOME/node].
        #[arg(long, env = "SUPERFLUID_NODE_DIR")]
        data_dir: Option<PathBuf>,
        /// The node's name in listings [default: the host name].
        #[arg(long)]
        name: Option<String>,
        /// Join and store the credential, but do not run the node.
        #[arg(long)]
        no_run: bool,
        /// Do not look for the head by mDNS; use the token's addresses.
        #[arg(long)]
        no_mdns: bool,
        /// Serve the engine's own load and speeds for Prometheus at
        /// `http://ADDR/metrics`, as `superfluid node --metrics`.
        #[arg(long, env = "SUPERFLUID_NODE_METRICS")]
        metrics: Option<SocketAddr>,
        #[command(flatten)]
        logs: LogFlags,
        #[command(flatten)]
        engine: EngineFlags,
    },
    /// List the fleet's nodes.
    Nodes {
        /// Print a JSON array instead of a table.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        admin: AdminFlags,
    },
    /// Cut a node off at once and refuse it from now on.
    Revoke {
        /// The node's id, name or key fingerprint.
        node: String,
        #[command(flatten)]
        admin: AdminFlags,
    },
    /// Send no new work to a node; running generations finish.
    Drain {
        /// The node's id, name or key fingerprint.
        node: String,
        #[command(flatten)]
        admin: AdminFlags,
    },
}

#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// Make a key and print it; it is shown only this once.
    Create {
        /// The key's unique name (letters, digits, `-`, `_`, `.`).
        name: String,
        /// The models it may use (comma-separated) [default: all].
        #[arg(long, value_delimiter = ',')]
        models: Vec<String>,
        /// How long it stays valid (e.g. 12h, 30d) [default: no expiry].
        #[arg(long, value_parser = parse_duration)]
        expires: Option<Duration>,
        /// Requests per minute (at least 1) [default: no limit].
        #[arg(long)]
        rpm: Option<u32>,
        /// Prompt and completion tokens per minute (at least 1) [default: no limit].
        #[arg(long)]
        tpm: Option<u32>,
        #[command(flatten)]
        admin: AdminFlags,
    },
    /// List the keys with their usage (never their secrets).
    List {
        /// Print a JSON array instead of a table.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        admin: AdminFlags,
    },
    /// Refuse a key from the next request on.
    Revoke {
        /// The key's name.
        name: String,
        #[command(flatten)]
        admin: AdminFlags,
    },
}

/// `90s`, `30m`, `1h`, `2d`, or plain seconds.
pub(super) fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let (digits, unit) = text.split_at(
        text.find(|c: char| !c.is_ascii_digit())
            .unwrap_or(text.len()),
    );
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{text:?} is not a duration like 90s, 30m, 1h or 2d"))?;
    let secs = match unit {
        "" | "s" => n,
        "m" => n.saturating_mul(60),
        "h" => n.saturating_mul(3600),
        "d" => n.saturating_mul(86400),
        _ => {
            return Err(format!(
                "unknown unit {unit:?} in {text:?}; use s, m, h or d"
            ))
        }
    };
    if secs == 0 {
        return Err("the duration must be at least 1s".into());
    }
    Ok(Duration::from_secs(secs))
}

/// `key=value`.
pub(super) fn parse_label(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
        _ => Err(format!("label {text:?} is not key=value")),
    }
}

/// `superfluid models`: where the fleet's models are loaded.
#[derive(Debug, Subcommand)]
pub enum ModelsCommand {
    /// List the head's models and the nodes that have each loaded.
    List {
        /// Print a JSON array instead of a table.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        admin: AdminFlags,
    },
    /// Load a model on a node (fetching its file from the head if the node
    /// lacks it) and wait until it serves.
    Load {
        /// The model id, as /v1/models lists it.
        model: String,
        /// The node's id, name or key fingerprint [default: where a request would load it].
        #[arg(long)]
        node: Option<String>,
        #[command(flatten)]
        admin: AdminFlags,
    },
    /// Unload a model from a node, or from every node that has it; running
    /// generations finish first.
    Unload {
        /// The model id.
        model: String,
        /// The node's id, name or key fingerprint [default: every node].
        #[arg(long)]
        node: Option<String>,
        #[command(flatten)]
        admin: AdminFlags,
    },
}
