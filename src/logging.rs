//! Where the process's logs go and in what shape: human-readable lines on
//! stderr, or with `--log-format json` one JSON object per line, each with
//! its request's span fields (id, model, key, node, tokens, ttft), for log
//! collectors (Loki, Vector, journald's JSON readers).

use clap::{Args, ValueEnum};
use tracing_subscriber::EnvFilter;

/// What is logged unless `RUST_LOG` says otherwise: llama.cpp's own chatter
/// (model metadata, buffer sizes) only when it warns.
const DEFAULT_LOG: &str = "info,llama_cpp_2=warn,llama-cpp-2=warn";

/// How the process logs.
#[derive(Debug, Args)]
pub struct LogFlags {
    /// How log lines are written to stderr: text, or json (one object per
    /// line, with the request's fields) for log collectors.
    #[arg(long, env = "SUPERFLUID_LOG_FORMAT", value_enum, default_value_t)]
    pub log_format: LogFormat,
}

/// The shape of log lines.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

impl LogFormat {
    /// The flag's value for this format.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Text => "text",
            Self::Json => "json",
        }
    }
}

/// The format [`init`] chose, for the engine hosts this process starts.
static CHOSEN: std::sync::OnceLock<LogFormat> = std::sync::OnceLock::new();

/// The format this process logs in.
pub fn current() -> LogFormat {
    CHOSEN.get().copied().unwrap_or_default()
}

/// Sends the process's logs to stderr in `format`.
pub fn init(format: LogFormat) {
    let _ = CHOSEN.set(format);
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(DEFAULT_LOG));
    let logs = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter);
    match format {
        LogFormat::Text => logs
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
        LogFormat::Json => logs
            .json()
            .with_current_span(true)
            .with_span_list(false)
            .init(),
    }
}
