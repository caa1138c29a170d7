//! The `superfluid` command: parses flags and dispatches. The work lives in
//! the `superfluid-head` and `superfluid-node` crates.
#![forbid(unsafe_code)]

mod admin_client;
mod cli;
mod engine;
mod fake_node;
mod fleet_cmd;
mod head_cmd;
mod keys_cmd;
mod node_cmd;
mod node_metrics;
mod runtime;
mod serve;

use clap::Parser;

/// What is logged unless `RUST_LOG` says otherwise: llama.cpp's own chatter
/// (model metadata, buffer sizes) only when it warns.
const DEFAULT_LOG: &str = "info,llama_cpp_2=warn,llama-cpp-2=warn";

fn main() -> std::process::ExitCode {
    let args = cli::Cli::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(DEFAULT_LOG)),
        )
        .init();
    // On CPU an engine computes on every core unless told otherwise; the
    // async runtime beside it gets what is left. A GPU build's threads
    // mostly wait, and its token rates may need more than one worker.
    let cores = engine::cores();
    let workers = args
        .command
        .engine()
        .filter(|_| !engine::GPU_BUILD)
        .map(|flags| runtime::workers_beside(flags.threads.map_or(cores, |t| t as usize), cores));
    let result = runtime::block_on(workers, async move {
        match args.command {
            cli::Command::Serve(flags) => serve::run(flags).await,
            cli::Command::Head(flags) => head_cmd::run(flags).await,
            cli::Command::Node(flags) => node_cmd::run(flags).await,
            cli::Command::Fleet(command) => fleet_cmd::run(command).await,
            cli::Command::Keys(command) => keys_cmd::run(command).await,
        }
    });
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("superfluid: {err:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
