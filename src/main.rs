//! The `superfluid` command: parses flags and dispatches. The work lives in
//! the `superfluid-head` and `superfluid-node` crates.
#![forbid(unsafe_code)]

mod admin_client;
mod cli;
mod engine;
mod engine_host;
mod fake_node;
mod fleet_cmd;
mod head_cmd;
mod host_exits;
mod keys_cmd;
mod logging;
mod models_cmd;
mod node_cmd;
mod node_metrics;
mod runtime;
mod serve;
mod sessions_writer;
mod top;

use clap::Parser;

fn main() -> std::process::ExitCode {
    let args = cli::Cli::parse();
    logging::init(args.command.log_format());
    // On CPU an engine computes on every core unless told otherwise; the
    // async runtime beside it gets what is left. A GPU build's threads
    // mostly wait, and its token rates may need more than one worker.
    let cores = engine::cores();
    let workers = args
        .command
        .engine()
        .filter(|_| !engine::GPU_BUILD)
        .map(|flags| runtime::workers_beside(flags.threads.map_or(cores, |t| t as usize), cores));
    // An engine host's async work is relaying its engine's events: one
    // thread beside the engine's.
    let workers = match args.command {
        cli::Command::EngineHost(_) => Some(1),
        _ => workers,
    };
    let result = runtime::block_on(workers, async move {
        match args.command {
            cli::Command::Serve(flags) => serve::run(flags).await,
            cli::Command::Head(flags) => head_cmd::run(flags).await,
            cli::Command::Node(flags) => node_cmd::run(flags).await,
            cli::Command::Fleet(command) => fleet_cmd::run(command).await,
            cli::Command::Keys(command) => keys_cmd::run(command).await,
            cli::Command::Models(command) => models_cmd::run(command).await,
            cli::Command::Top(flags) => top::run(flags).await,
            cli::Command::SessionsWriter(flags) => sessions_writer::run(flags).await,
            cli::Command::EngineHost(flags) => engine_host::run(flags).await,
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
