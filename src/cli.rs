//! Command-line flags. Every flag can also be set with a `SUPERFLUID_*`
//! environment variable.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// An LLM inference fleet for machines you own.
#[derive(Debug, Parser)]
#[command(name = "superfluid", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a head and a node in one process: an OpenAI-compatible server on
    /// one machine.
    Serve(ServeFlags),
}

/// Flags of the engine a node runs.
#[derive(Debug, Args)]
pub struct EngineFlags {
    /// The GGUF model to serve [default: the model scripts/setup installs].
    #[arg(long, env = "SUPERFLUID_MODEL")]
    pub model: Option<PathBuf>,
    /// Sequences generated at once.
    #[arg(long, env = "SUPERFLUID_SLOTS", default_value_t = 4)]
    pub slots: u32,
    /// Tokens one conversation may hold (prompt plus answer).
    #[arg(long, env = "SUPERFLUID_CTX", default_value_t = 4096)]
    pub ctx: u32,
    /// CPU threads for inference [default: all cores].
    #[arg(long, env = "SUPERFLUID_THREADS")]
    pub threads: Option<u32>,
}

#[derive(Debug, Args)]
pub struct ServeFlags {
    /// Where the HTTP API listens.
    #[arg(long, env = "SUPERFLUID_HTTP", default_value = "127.0.0.1:7700")]
    pub http: SocketAddr,
    #[command(flatten)]
    pub engine: EngineFlags,
}
