//! Command-line flags. Every flag can also be set with a `SUPERFLUID_*`
//! environment variable.

use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::logging::{LogFlags, LogFormat};

mod admin;
mod offload;
pub use admin::{AdminFlags, FleetCommand, KeysCommand, ModelsCommand};
pub use offload::OffloadFlags;
use superfluid_head::api::browser::{BrowserError, BrowserPolicy};
use superfluid_head::fleet::placement::PlacementConfig;
use superfluid_head::keys::Keys;
use superfluid_head::routing::RoutePolicy;
use superfluid_head::server::connections::DEFAULT_MAX_CONNECTIONS;
use superfluid_head::sessions::SessionLimits;

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
    /// Run the head of a fleet: the HTTP API, and Link F for nodes to join.
    Head(HeadFlags),
    /// Run a node that has joined a fleet (see `fleet join`).
    Node(NodeFlags),
    /// Manage the fleet: join tokens, joining, listing, draining, revoking.
    #[command(subcommand)]
    Fleet(FleetCommand),
    /// Manage the API keys clients use: create, list, revoke.
    #[command(subcommand)]
    Keys(KeysCommand),
    /// See and override where the fleet's models are loaded: list, load, unload.
    #[command(subcommand)]
    Models(ModelsCommand),
    /// Watch the fleet in the terminal: nodes, load, speeds and recent
    /// requests, refreshed every second; `q` quits.
    Top(TopFlags),
    /// Appends to a session database from many writers, printing each
    /// acknowledged event: the subject of the crash test.
    #[command(hide = true)]
    SessionsWriter(crate::sessions_writer::Flags),
    /// Runs one model's engine for the node that started it, speaking to it
    /// over the Unix socket on stdin.
    #[command(hide = true)]
    EngineHost(crate::engine_host::Flags),
}

impl Command {
    /// The engine flags of a command that runs an engine in this process.
    pub fn engine(&self) -> Option<&EngineFlags> {
        match self {
            Command::Serve(flags) => Some(&flags.engine),
            Command::Node(flags) => Some(&flags.engine),
            Command::Fleet(FleetCommand::Join { engine, .. }) => Some(engine),
            Command::Head(_)
            | Command::Fleet(_)
            | Command::Keys(_)
            | Command::Models(_)
            | Command::Top(_)
            | Command::SessionsWriter(_)
            | Command::EngineHost(_) => None,
        }
    }

    /// The shape of log lines: `--log-format` on `serve`, `head`, `node`
    /// and `fleet join`, text for the other commands.
    pub fn log_format(&self) -> LogFormat {
        match self {
            Command::Serve(flags) => flags.logs.log_format,
            Command::Head(flags) => flags.logs.log_format,
            Command::Node(flags) => flags.logs.log_format,
            Command::Fleet(FleetCommand::Join { logs, .. }) => logs.log_format,
            Command::EngineHost(flags) => flags.log_format,
            _ => LogFormat::Text,
        }
    }
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
    /// One KV cache shared by all slots instead of one per slot: faster
    /// decoding of several conversations at once while few are cached,
    /// slower prompts while many are.
    #[arg(long, env = "SUPERFLUID_SHARED_KV")]
    pub shared_kv: bool,
    /// Run llama.cpp inside this process instead of in an engine host (a
    /// child process per model). Starts a little faster, but an abort in
    /// llama.cpp then ends this process, and with `serve` the head too.
    #[arg(long, env = "SUPERFLUID_ENGINE_IN_PROCESS")]
    pub engine_in_process: bool,
    #[command(flatten)]
    pub offload: OffloadFlags,
}

/// Who may use the client APIs.
#[derive(Debug, Args)]
pub struct AccessFlags {
    /// A key clients must present, as `Authorization: Bearer KEY` or
    /// `x-api-key: KEY` (repeatable, or comma-separated); it may use every model.
    #[arg(
        long = "api-key",
        env = "SUPERFLUID_API_KEY",
        value_delimiter = ',',
        hide_env_values = true
    )]
    pub api_keys: Vec<String>,
    /// Serve an open API, with no key, on an address other machines can reach.
    #[arg(long)]
    pub insecure_no_auth: bool,
    /// A key `GET /metrics` needs, as `Authorization: Bearer KEY`; without
    /// it the metrics are open.
    #[arg(long, env = "SUPERFLUID_METRICS_KEY", hide_env_values = true)]
    pub metrics_key: Option<String>,
}

/// What web browsers may do with the HTTP API.
#[derive(Debug, Args)]
pub struct BrowserFlags {
    /// An origin whose web pages may call the API from a browser (CORS), as
    /// `http://localhost:3000` (repeatable, or comma-separated); `*` for
    /// every origin, allowed only when clients need a key.
    #[arg(
        long = "cors-origin",
        env = "SUPERFLUID_CORS_ORIGIN",
        value_delimiter = ','
    )]
    pub cors_origins: Vec<String>,
    /// A name besides localhost, 127.0.0.1 and [::1] that clients may
    /// address a head on loopback by (repeatable, or comma-separated).
    #[arg(
        long = "allowed-host",
        env = "SUPERFLUID_ALLOWED_HOST",
        value_delimiter = ','
    )]
    pub allowed_hosts: Vec<String>,
}

impl BrowserFlags {
    /// The checked policy; `keys` decides whether `--cors-origin '*'` may be.
    pub fn policy(&self, keys: &Keys) -> Result<BrowserPolicy, BrowserError> {
        BrowserPolicy::from_flags(&self.cors_origins, &self.allowed_hosts, keys)
    }
}

/// Where models are loaded, and for how long.
#[derive(Debug, Args)]
pub struct PlacementFlags {
    /// Seconds a request waits for its model to load on a node when no
    /// node has it loaded; past that it gets a 503 that says why.
    #[arg(long, env = "SUPERFLUID_LOAD_TIMEOUT", default_value_t = 120)]
    pub load_timeout: u64,
    /// Seconds a model stays loaded on a node that gets no request for it
    /// (Ollama's keep_alive); the next request loads it again. 0: never
    /// unload.
    #[arg(long, env = "SUPERFLUID_UNLOAD_AFTER", default_value_t = 900)]
    pub unload_after: u64,
}

impl PlacementFlags {
    pub fn config(&self) -> PlacementConfig {
        PlacementConfig {
            load_timeout: Duration::from_secs(self.load_timeout.max(1)),
            unload_after: (self.unload_after > 0).then(|| Duration::from_secs(self.unload_after)),
        }
    }
}

/// The limits on stored sessions; a request past one is refused with an
/// error that names the limit and its flag.
#[derive(Debug, Args)]
pub struct SessionLimitFlags {
    /// Events one session may hold (its inherited history included).
    #[arg(long, env = "SUPERFLUID_SESSION_MAX_EVENTS", default_value_t = SessionLimits::default().max_events)]
    pub session_max_events: u64,
    /// Bytes one stored message may have (its JSON as stored).
    #[arg(long, env = "SUPERFLUID_SESSION_MAX_MESSAGE_BYTES", default_value_t = SessionLimits::default().max_message_bytes)]
    pub session_max_message_bytes: u64,
    /// Sessions one API key may hold (without keys, all clients together).
    #[arg(long, env = "SUPERFLUID_SESSION_MAX_PER_KEY", default_value_t = SessionLimits::default().max_sessions_per_key)]
    pub session_max_per_key: u64,
    /// Bytes the session database may use, all sessions together.
    #[arg(long, env = "SUPERFLUID_SESSION_MAX_TOTAL_BYTES", default_value_t = SessionLimits::default().max_total_bytes)]
    pub session_max_total_bytes: u64,
}

impl SessionLimitFlags {
    /// The limits the session store enforces.
    pub fn limits(&self) -> SessionLimits {
        SessionLimits {
            max_events: self.session_max_events,
            max_message_bytes: self.session_max_message_bytes,
            max_sessions_per_key: self.session_max_per_key,
            max_total_bytes: self.session_max_total_bytes,
        }
    }
}

#[derive(Debug, Args)]
pub struct ServeFlags {
    #[command(flatten)]
    pub logs: LogFlags,
    /// Where the HTTP API listens.
    #[arg(long, env = "SUPERFLUID_HTTP", default_value = "127.0.0.1:7700")]
    pub http: SocketAddr,
    /// HTTP connections held open at once; more wait until one closes.
    #[arg(long, env = "SUPERFLUID_MAX_CONNECTIONS", default_value_t = DEFAULT_MAX_CONNECTIONS)]
    pub max_connections: NonZeroUsize,
    /// Also serve the API on this port (Ollama's is 11434), on the --http
    /// address's IP, for tools that assume Ollama's port.
    #[arg(long, env = "SUPERFLUID_OLLAMA_PORT")]
    pub ollama_port: Option<u16>,
    #[command(flatten)]
    pub access: AccessFlags,
    #[command(flatten)]
    pub browser: BrowserFlags,
    /// How generations are routed to nodes: least-ttft, round-robin, least-loaded or random.
    #[arg(long, env = "SUPERFLUID_ROUTE_POLICY", default_value = "least-ttft")]
    pub route_policy: RoutePolicy,
    /// Generations each node may queue beyond its slots; past that (every
    /// node full) requests are refused at once with 429 and Retry-After
    /// [default: 2 per slot].
    #[arg(long, env = "SUPERFLUID_MAX_QUEUE")]
    pub max_queue: Option<u32>,
    /// Where the sessions database (sessions.db) is kept [default: $SUPERFLUID_HOME].
    #[arg(long, env = "SUPERFLUID_SERVE_DIR")]
    pub data_dir: Option<PathBuf>,
    #[command(flatten)]
    pub session_limits: SessionLimitFlags,
    /// An embedding model (a GGUF that names a pooling type, such as the
    /// all-MiniLM-L6-v2 scripts/setup installs) to serve beside --model,
    /// for /v1/embeddings and Ollama's /api/embed.
    #[arg(long, env = "SUPERFLUID_EMBEDDING_MODEL")]
    pub embedding_model: Option<PathBuf>,
    #[command(flatten)]
    pub placement: PlacementFlags,
    #[command(flatten)]
    pub engine: EngineFlags,
}

#[derive(Debug, Args)]
pub struct HeadFlags {
    #[command(flatten)]
    pub logs: LogFlags,
    /// Where the HTTP API listens.
    #[arg(long, env = "SUPERFLUID_HTTP", default_value = "127.0.0.1:7700")]
    pub http: SocketAddr,
    /// HTTP connections held open at once; more wait until one closes.
    #[arg(long, env = "SUPERFLUID_MAX_CONNECTIONS", default_value_t = DEFAULT_MAX_CONNECTIONS)]
    pub max_connections: NonZeroUsize,
    /// Also serve the API on this port (Ollama's is 11434), on the --http
    /// address's IP, for tools that assume Ollama's port.
    #[arg(long, env = "SUPERFLUID_OLLAMA_PORT")]
    pub ollama_port: Option<u16>,
    #[command(flatten)]
    pub access: AccessFlags,
    #[command(flatten)]
    pub browser: BrowserFlags,
    /// Where Link F listens for nodes (UDP).
    #[arg(long, env = "SUPERFLUID_LINK", default_value = "0.0.0.0:7701")]
    pub link: SocketAddr,
    /// The head's data dir: fleet key, admin key, enrolled nodes [default: $SUPERFLUID_HOME/head].
    #[arg(long, env = "SUPERFLUID_HEAD_DIR")]
    pub data_dir: Option<PathBuf>,
    /// A model the fleet serves (repeatable): a GGUF file, or a directory
    /// whose every GGUF is served [default: the model scripts/setup installs].
    #[arg(long = "model", env = "SUPERFLUID_MODEL", value_delimiter = ',')]
    pub models: Vec<PathBuf>,
    #[command(flatten)]
    pub placement: PlacementFlags,
    #[command(flatten)]
    pub session_limits: SessionLimitFlags,
    /// Do not advertise the head on the LAN by mDNS.
    #[arg(long)]
    pub no_mdns: bool,
    /// How generations are routed to nodes: least-ttft (the node with the
    /// least predicted time to first token, counting its cached prefix),
    /// round-robin, least-loaded or random.
    #[arg(long, env = "SUPERFLUID_ROUTE_POLICY", default_value = "least-ttft")]
    pub route_policy: RoutePolicy,
    /// Generations each node may queue beyond its slots; past that (every
    /// node full) requests are refused at once with 429 and Retry-After
    /// [default: 2 per slot].
    #[arg(long, env = "SUPERFLUID_MAX_QUEUE")]
    pub max_queue: Option<u32>,
}

#[derive(Debug, Args)]
pub struct NodeFlags {
    #[command(flatten)]
    pub logs: LogFlags,
    /// The node's data dir: its key and fleet credential [default: $SUPERFLUID_HOME/node].
    #[arg(long, env = "SUPERFLUID_NODE_DIR")]
    pub data_dir: Option<PathBuf>,
    /// Serve the engine's own load and speeds for Prometheus at
    /// `http://ADDR/metrics` (the head's /metrics covers the fleet).
    #[arg(long, env = "SUPERFLUID_NODE_METRICS")]
    pub metrics: Option<SocketAddr>,
    /// Serve the model with the fake engine (modelled costs, deterministic
    /// tokens, no model computed), for fleet tests and benchmarks.
    #[arg(long, hide = true)]
    pub fake_engine: bool,
    #[command(flatten)]
    pub engine: EngineFlags,
}

/// What `superfluid top` watches.
#[derive(Debug, Args)]
pub struct TopFlags {
    /// The head's HTTP address.
    #[arg(long, env = "SUPERFLUID_URL", default_value = "http://127.0.0.1:7700")]
    pub url: String,
    /// A client API key, when the head needs one.
    #[arg(long, env = "SUPERFLUID_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// Milliseconds between refreshes.
    #[arg(long, default_value_t = 1000)]
    pub interval_ms: u64,
}

#[cfg(test)]
mod tests;
