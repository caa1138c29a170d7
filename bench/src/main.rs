//! `superfluid-bench`: measures superfluid against baselines in the same run.
//!
//! `serve`: the same requests (a) to the llama.cpp engine called in-process,
//! (b) through `superfluid serve` over HTTP, (c) through `superfluid head`
//! and a joined node with no key and (d) the same with a key that has
//! request and token limits, and (e) to `llama-server` when one is given;
//! reports decode tokens/s, prefill tokens/s and time to first token at 1
//! and 4 concurrent streams, and the ratios (b)/(a), (d)/(c) (the cost of
//! keys and limits), (a)/(e) and (b)/(e), and (f) a second `superfluid
//! serve` whose `/metrics` is polled every 100 ms while it is measured,
//! against (b): the cost of being scraped, and (g) `superfluid serve`
//! through OpenAI's chat, Ollama's `/api/chat` and Anthropic's
//! `/v1/messages`, each on a serve of its own: the cost of each API's codec
//! against OpenAI's, and (h) a `superfluid serve --engine-in-process`,
//! against which (b) is the cost of running llama.cpp in an engine host,
//! a child process; with the memory (b) and its engine host hold after
//! the rounds, beside (h)'s and the model file's size.
//!
//! `routing`: every routing policy on the same requests, in a simulated
//! fleet of fake engines of mixed speed and on a real fleet of two nodes;
//! reports time to first token and prefill tokens avoided, against an
//! oracle and the targets.
//!
//! `models`: a model file from the head to a node over Link F against a
//! plain loopback TCP copy of the same file.
//!
//! `failover`: the pause a client sees when its node is lost mid-answer
//! (SIGKILL, and a cut link in network namespaces), p50 and max over many
//! losses, on fake-engine nodes.
//!
//! `load`: many streaming clients through the head and fake-engine nodes
//! against the same fake engines in-process: the head's CPU time per
//! token and the pauses between tokens it adds.
//!
//! `sessions`: durable appends through the session store's group commit
//! against each append in its own SQLite transaction, the store's start-up
//! on 1M events, and memory per idle session.
#![forbid(unsafe_code)]

mod apis;
mod bare_join;
mod contenders;
mod embeddings;
mod failover;
mod fleet;
mod http;
mod inprocess;
mod keyed;
mod kv_cache;
mod load;
mod measure;
mod models;
mod netns;
mod report;
mod routing;
mod scraper;
mod sessions;
mod stats;
mod structured;
mod workload;

use std::path::PathBuf;

use anyhow::Result;
use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "superfluid-bench")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// The engine in-process vs. `superfluid serve` vs. llama-server.
    Serve(ServeArgs),
    /// Every routing policy on a simulated fleet and on a real one.
    Routing(RoutingArgs),
    /// Model transfer head -> node over Link F vs. a loopback TCP copy.
    Models(ModelsArgs),
    /// Session store appends with group commit vs. one transaction each.
    Sessions(sessions::SessionsArgs),
    /// The pause a client sees when its node is killed or cut off.
    Failover(FailoverArgs),
    /// Many streams through the head vs. the same fake engines in-process.
    Load(LoadArgs),
}

#[derive(Debug, clap::Args)]
pub struct FailoverArgs {
    /// The GGUF model the fleet announces (the fake engine reads only its hash).
    #[arg(long, env = "SUPERFLUID_MODEL")]
    pub model: PathBuf,
    /// The `superfluid` binary to start the head and nodes with.
    #[arg(long)]
    pub superfluid: PathBuf,
    /// Losses of each kind.
    #[arg(long, default_value_t = 12, value_parser = clap::value_parser!(u32).range(1..=50))]
    pub kills: u32,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct LoadArgs {
    /// The GGUF model the fleet announces (the fake engine reads only its hash).
    #[arg(long, env = "SUPERFLUID_MODEL")]
    pub model: PathBuf,
    /// The `superfluid` binary to start the head and nodes with.
    #[arg(long)]
    pub superfluid: PathBuf,
    /// Streaming clients at once.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..=2000))]
    pub clients: u32,
    /// Fake-engine nodes.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=16))]
    pub nodes: u32,
    /// Slots of each node: enough for every client, so none is refused.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..))]
    pub slots: u32,
    /// Tokens each stream asks for.
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u32).range(2..=4000))]
    pub max_tokens: u32,
    /// Rounds; each runs every client once in-process, then through the head.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=20))]
    pub rounds: u32,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct ModelsArgs {
    /// The GGUF file to move.
    #[arg(long, env = "SUPERFLUID_MODEL")]
    pub model: PathBuf,
    /// Rounds; each moves the file once each way.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..))]
    pub rounds: u32,
    /// The `superfluid` binary: with it, also time `fleet join` on a bare
    /// machine (a node with an empty SUPERFLUID_HOME) to the first token.
    #[arg(long)]
    pub superfluid: Option<PathBuf>,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct RoutingArgs {
    /// The GGUF model of the real fleet.
    #[arg(long, env = "SUPERFLUID_MODEL")]
    pub model: Option<PathBuf>,
    /// Seed of every workload: each policy gets the same requests.
    #[arg(long, default_value_t = 20_261_202)]
    pub seed: u64,
    /// Seconds of arrivals per simulated run. Near saturation the fleet's
    /// queues take several seconds to fill from empty; long runs measure
    /// the steady state rather than the start.
    #[arg(long, default_value_t = 20.0, value_parser = positive_seconds)]
    pub sim_seconds: f64,
    /// Conversations on the real fleet, per policy.
    #[arg(long, default_value_t = 12)]
    pub real_conversations: usize,
    /// Simulate only these loads (light, medium, near-saturation); all
    /// three by default. Repeat the flag for several.
    #[arg(long = "load", value_parser = ["light", "medium", "near-saturation"])]
    pub loads: Vec<String>,
    /// Pairs of least-ttft and least-loaded runs at each load, each pair on
    /// its own no-reuse arrivals; that target is the median of their paired
    /// TTFT p50 ratios (the other policies run on the first pair's only).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    pub no_reuse_pairs: u32,
    /// Simulate only this workload (chat or no-reuse); both by default.
    #[arg(long, value_parser = ["chat", "no-reuse"])]
    pub workload: Option<String>,
    /// Leave out the simulated fleet.
    #[arg(long)]
    pub skip_sim: bool,
    /// Leave out the real fleet.
    #[arg(long)]
    pub skip_real: bool,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// The GGUF model.
    #[arg(long, env = "SUPERFLUID_MODEL")]
    pub model: PathBuf,
    /// The `superfluid` binary to start with `serve`.
    #[arg(long)]
    pub superfluid: PathBuf,
    /// A llama-server binary to measure as well.
    #[arg(long, env = "LLAMA_SERVER")]
    pub llama_server: Option<PathBuf>,
    /// Inference threads for every contender.
    #[arg(long, default_value_t = 2)]
    pub threads: u32,
    /// Slots (parallel sequences) for every contender.
    #[arg(long, default_value_t = 4)]
    pub slots: u32,
    /// Tokens per slot.
    #[arg(long, default_value_t = 2048)]
    pub ctx: u32,
    /// Tokens generated per request.
    #[arg(long, default_value_t = 128)]
    pub max_tokens: u32,
    /// Requests sent alone, one after another, in each round: the samples
    /// of 1-stream decode and time to first token.
    #[arg(long, default_value_t = 3)]
    pub alone: u32,
    /// Batches of 4 concurrent streams per round: the samples of 4-stream
    /// decode.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub together: u32,
    /// Long prompts per round, each generating 1 token: the samples of
    /// prefill tokens/s.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..))]
    pub prefill: u32,
    /// Rounds; each round measures every contender in turn on fresh prompts.
    #[arg(long, default_value_t = 6)]
    pub rounds: u32,
    /// Run only these steps (comma-separated): `contenders` (every
    /// contender's decode, prefill and TTFT), `structured` (chat with a JSON
    /// schema against without, `--alone` prompts a round), `embeddings`
    /// (superfluid serve against llama-server on /v1/embeddings),
    /// `kv-cache` (decode with q8_0 and q4_0 KV caches against f16, `--alone`
    /// prompts a round). All by default.
    #[arg(long, value_enum, value_delimiter = ',')]
    pub only: Vec<ServePart>,
    /// The embedding model of the embeddings step [default:
    /// all-MiniLM-L6-v2.gguf beside --model].
    #[arg(long)]
    pub embedding_model: Option<PathBuf>,
    /// Inputs per batch request of the embeddings step.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=2048))]
    pub embed_batch: u32,
    /// Batch requests per round of the embeddings step.
    #[arg(long, default_value_t = 2)]
    pub embed_batches: u32,
    /// Single-input requests per round of the embeddings step, sent one
    /// after another.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..))]
    pub embed_singles: u32,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// The steps of `bench serve`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ServePart {
    Contenders,
    Structured,
    Embeddings,
    KvCache,
}

impl ServeArgs {
    /// Whether step `part` runs.
    pub fn runs(&self, part: ServePart) -> bool {
        self.only.is_empty() || self.only.contains(&part)
    }

    /// The embedding model: `--embedding-model`, or all-MiniLM-L6-v2
    /// beside the chat model (where scripts/setup puts both).
    pub fn embedding_model(&self) -> PathBuf {
        self.embedding_model
            .clone()
            .unwrap_or_else(|| self.model.with_file_name("all-MiniLM-L6-v2.gguf"))
    }
}

/// Parses a number of seconds that must be finite and above 0.
fn positive_seconds(s: &str) -> Result<f64, String> {
    let secs: f64 = s
        .parse()
        .map_err(|_| format!("{s:?} is not a number of seconds"))?;
    if secs.is_finite() && secs > 0.0 {
        Ok(secs)
    } else {
        Err(format!("{s} is not a positive number of seconds; try 20"))
    }
}

fn main() -> Result<()> {
    match Cli::parse().command {
        Command::Routing(args) => {
            let sim = if args.skip_sim {
                None
            } else {
                Some(routing::run_simulated(&args)?)
            };
            let real = if args.skip_real {
                None
            } else {
                Some(routing::run_real(&args)?)
            };
            let report = routing::report(args.seed, sim, real);
            if args.json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                routing::report::print_table(&report);
            }
            Ok(())
        }
        Command::Failover(args) => {
            let report = failover::run(&args.superfluid, &args.model, args.kills as usize)?;
            if args.json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                failover::print_table(&report);
            }
            Ok(())
        }
        Command::Load(args) => {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()?;
            let shape = load::Shape {
                clients: args.clients as usize,
                nodes: args.nodes as usize,
                slots_per_node: args.slots,
                max_tokens: args.max_tokens,
                rounds: args.rounds,
            };
            let report = runtime.block_on(load::run(&args.superfluid, &args.model, shape))?;
            if args.json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                load::print_table(&report);
            }
            Ok(())
        }
        Command::Sessions(args) => {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?;
            let report = runtime.block_on(sessions::run(&args))?;
            if args.json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                sessions::print_table(&report);
            }
            Ok(())
        }
        Command::Models(args) => {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?;
            let mut report = runtime.block_on(models::run(&args.model, args.rounds))?;
            if let Some(bin) = &args.superfluid {
                eprintln!("timing fleet join on a bare machine to the first token");
                report.bare_join = Some(runtime.block_on(bare_join::run(bin, &args.model))?);
            }
            if args.json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                models::print_table(&report);
            }
            Ok(())
        }
        Command::Serve(args) => {
            // The measuring client runs on one thread: each streamed token
            // then wakes one thread of the bench rather than a connection
            // task on one worker and the request on another, and takes as
            // little as it can from the cores the contenders compute on.
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let report = runtime.block_on(report::serve(&args))?;
            if args.json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                report::print_table(&report);
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::positive_seconds;

    #[test]
    fn sim_seconds_must_be_a_positive_number() {
        assert_eq!(positive_seconds("20"), Ok(20.0));
        assert_eq!(positive_seconds("0.5"), Ok(0.5));
        for bad in ["0", "-3", "inf", "NaN"] {
            let err = positive_seconds(bad).unwrap_err();
            assert!(err.contains("positive number of seconds"), "{bad}: {err}");
        }
        assert!(positive_seconds("soon")
            .unwrap_err()
            .contains("not a number"));
    }
}
