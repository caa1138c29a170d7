//! The processes `bench serve` measures, started before the first round,
//! and the targets their requests go to.

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
use serde::Serialize;
use superfluid_node::Engine;

use crate::apis::Api;
use crate::http::{self, ServerProcess};
use crate::keyed::{self, KeyedHead};
use crate::measure::Target;
use crate::scraper::Scraper;
use crate::ServeArgs;

/// The chat APIs measured against each other, each on a `superfluid serve`
/// of its own so no one answers from a prefix another one left.
const CHAT_APIS: [(&str, Api); 3] = [
    ("openai_chat", Api::OpenAiChat),
    ("ollama_chat", Api::OllamaChat),
    ("anthropic_messages", Api::AnthropicMessages),
];

/// Every server process of the run; all are killed on drop.
pub struct Contenders {
    /// `superfluid serve`: the head and node in it, llama.cpp in its
    /// engine host, a child process.
    serve: ServerProcess,
    /// The same with `--engine-in-process`: llama.cpp in the serve process.
    serve_in_process: ServerProcess,
    scraped: ServerProcess,
    pub scraper: Scraper,
    chat: Vec<ServerProcess>,
    open: KeyedHead,
    limited: KeyedHead,
    llama_server: Option<ServerProcess>,
}

impl Contenders {
    pub async fn start(args: &ServeArgs) -> Result<Contenders> {
        let t = args.threads.to_string();
        let s = args.slots.to_string();
        let model = args.model.display().to_string();
        let serve_args = serve_args(args, None);
        let serve = http::start(&args.superfluid, &serve_args)
            .await
            .context("starting superfluid serve")?;
        let mut in_process_args = serve_args.clone();
        in_process_args.push("--engine-in-process".into());
        let serve_in_process = http::start(&args.superfluid, &in_process_args)
            .await
            .context("starting superfluid serve --engine-in-process")?;
        let scraped = http::start(&args.superfluid, &serve_args)
            .await
            .context("starting a second superfluid serve, to be scraped")?;
        let scraper = Scraper::start(&scraped.base)?;
        let mut chat = Vec::new();
        for (name, _) in CHAT_APIS {
            chat.push(
                http::start(&args.superfluid, &serve_args)
                    .await
                    .with_context(|| format!("starting superfluid serve for {name}"))?,
            );
        }
        let open = keyed::start(args, "head-no-key", false)
            .await
            .context("starting a head and node with no key")?;
        let limited = keyed::start(args, "head-limited-key", true)
            .await
            .context("starting a head and node with a limited key")?;
        let llama_server = match &args.llama_server {
            Some(binary) => {
                let total_ctx = (args.ctx * args.slots).to_string();
                let ls_args = owned(&[
                    "--host",
                    "127.0.0.1",
                    "--port",
                    "{port}",
                    "-t",
                    &t,
                    "-tb",
                    &t,
                    "-np",
                    &s,
                    "-c",
                    &total_ctx,
                    "-m",
                    &model,
                ]);
                Some(
                    http::start(binary, &ls_args)
                        .await
                        .context("starting llama-server")?,
                )
            }
            None => None,
        };
        Ok(Contenders {
            serve,
            serve_in_process,
            scraped,
            scraper,
            chat,
            open,
            limited,
            llama_server,
        })
    }

    /// Every contender's name and target, `engine` first.
    pub fn targets<'a>(
        &'a self,
        engine: &'a Arc<dyn Engine>,
        model: &'a str,
    ) -> Vec<(&'static str, Target<'a>)> {
        let http = |api, base: &'a str, key, scraper| Target::Http {
            api,
            base,
            model,
            key,
            scraper,
        };
        let mut targets = vec![
            ("in_process", Target::InProcess(engine)),
            (
                "superfluid_serve",
                http(Api::Completions, &self.serve.base, None, None),
            ),
            (
                "serve_engine_in_process",
                http(Api::Completions, &self.serve_in_process.base, None, None),
            ),
            (
                "head_no_key",
                http(Api::Completions, &self.open.head.base, None, None),
            ),
            (
                "head_limited_key",
                http(
                    Api::Completions,
                    &self.limited.head.base,
                    self.limited.key.as_deref(),
                    None,
                ),
            ),
            (
                "serve_scraped",
                http(
                    Api::Completions,
                    &self.scraped.base,
                    None,
                    Some(&self.scraper),
                ),
            ),
        ];
        for ((name, api), server) in CHAT_APIS.iter().zip(&self.chat) {
            targets.push((name, http(*api, &server.base, None, None)));
        }
        if let Some(server) = &self.llama_server {
            targets.push((
                "llama_server",
                http(Api::Completions, &server.base, None, None),
            ));
        }
        targets
    }

    /// What `superfluid_serve`, its engine host and
    /// `serve_engine_in_process` hold in memory now, beside the size of
    /// `model`.
    pub fn memory(&self, model: &Path) -> Result<Memory> {
        let model_file_bytes = std::fs::metadata(model)
            .with_context(|| format!("reading the size of {}", model.display()))?
            .len();
        let hosts = engine_hosts(self.serve.pid());
        if hosts.is_empty() {
            eprintln!(
                "bench: superfluid_serve (pid {}) has no engine-host child \
                 (is SUPERFLUID_ENGINE_IN_PROCESS set?)",
                self.serve.pid()
            );
        }
        let host: Vec<Resident> = hosts.iter().filter_map(|&pid| resident(pid)).collect();
        let sum = |field: fn(&Resident) -> u64| {
            (!host.is_empty()).then(|| host.iter().map(field).sum::<u64>())
        };
        let serve = resident(self.serve.pid());
        let in_process = resident(self.serve_in_process.pid());
        Ok(Memory {
            model_file_bytes,
            engine_hosts: host.len(),
            engine_host_rss_bytes: sum(|r| r.rss),
            engine_host_rss_file_bytes: sum(|r| r.rss_file),
            serve_rss_bytes: serve.map(|r| r.rss),
            serve_rss_file_bytes: serve.map(|r| r.rss_file),
            serve_engine_in_process_rss_bytes: in_process.map(|r| r.rss),
            serve_engine_in_process_rss_file_bytes: in_process.map(|r| r.rss_file),
        })
    }
}

/// Resident memory of `superfluid_serve`'s processes and of
/// `serve_engine_in_process`, read from `/proc` after the rounds (every
/// weight read, every slot's KV cache used), beside the model file. The
/// `_file` figures are the part mapped from files, mostly the model's
/// weights, which llama.cpp maps rather than copies; the rest is the KV
/// cache, buffers and the process's own heap. `None` where the process
/// could not be read.
#[derive(Debug, Serialize)]
pub struct Memory {
    pub model_file_bytes: u64,
    /// Engine-host children of `superfluid_serve` found (1: its one model).
    pub engine_hosts: usize,
    /// VmRSS of `superfluid_serve`'s engine host(s), summed.
    pub engine_host_rss_bytes: Option<u64>,
    /// RssFile of the same.
    pub engine_host_rss_file_bytes: Option<u64>,
    /// VmRSS of the `superfluid_serve` process itself (head and node), not
    /// counting its engine host.
    pub serve_rss_bytes: Option<u64>,
    pub serve_rss_file_bytes: Option<u64>,
    /// VmRSS of `serve_engine_in_process`: head, node and llama.cpp in one
    /// process.
    pub serve_engine_in_process_rss_bytes: Option<u64>,
    pub serve_engine_in_process_rss_file_bytes: Option<u64>,
}

/// One process's resident memory, in bytes.
#[derive(Debug, Clone, Copy)]
struct Resident {
    /// VmRSS.
    rss: u64,
    /// RssFile: pages mapped from files.
    rss_file: u64,
}

/// The resident memory of process `pid`, from `/proc/PID/status`.
fn resident(pid: u32) -> Option<Resident> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    Some(Resident {
        rss: status_kib(&status, "VmRSS:")? * 1024,
        rss_file: status_kib(&status, "RssFile:").unwrap_or(0) * 1024,
    })
}

/// The value in kB of line `key` of a `/proc/PID/status`.
fn status_kib(status: &str, key: &str) -> Option<u64> {
    let line = status.lines().find_map(|l| l.strip_prefix(key))?;
    line.split_whitespace().next()?.parse().ok()
}

/// The process ids of the children of `parent` whose command line names
/// `engine-host`.
fn engine_hosts(parent: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            parent_pid(&stat) == Some(parent)
                && cmdline.split(|&b| b == 0).any(|arg| arg == b"engine-host")
        })
        .collect()
}

/// The parent pid in a `/proc/PID/stat` line: field 4, counted after the
/// command name in parentheses (which may itself hold spaces and `)`).
fn parent_pid(stat: &str) -> Option<u32> {
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// The pairs the report compares, `(of, to)`, by contender name; those
/// whose contenders did not run are left out.
pub const PAIRS: [(&str, &str); 8] = [
    ("superfluid_serve", "in_process"),
    ("superfluid_serve", "serve_engine_in_process"),
    ("head_limited_key", "head_no_key"),
    ("serve_scraped", "superfluid_serve"),
    ("ollama_chat", "openai_chat"),
    ("anthropic_messages", "openai_chat"),
    ("in_process", "llama_server"),
    ("superfluid_serve", "llama_server"),
];

/// The arguments of a `superfluid serve` with the run's model, threads,
/// slots and context (`{port}` to be filled in), and `embedding_model`
/// beside it when there is one.
pub fn serve_args(args: &ServeArgs, embedding_model: Option<&Path>) -> Vec<String> {
    let mut serve = owned(&[
        "serve",
        "--http",
        "127.0.0.1:{port}",
        "--threads",
        &args.threads.to_string(),
        "--slots",
        &args.slots.to_string(),
        "--ctx",
        &args.ctx.to_string(),
        "--model",
        &args.model.display().to_string(),
    ]);
    if let Some(path) = embedding_model {
        serve.push("--embedding-model".into());
        serve.push(path.display().to_string());
    }
    serve
}

pub fn owned(args: &[&str]) -> Vec<String> {
    args.iter().map(|a| a.to_string()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parent_pid_is_read_past_a_command_name_with_spaces() {
        assert_eq!(parent_pid("42 (superfluid) S 7 42 42 0"), Some(7));
        assert_eq!(parent_pid("42 (a) b) (c) R 1234 42 42 0"), Some(1234));
        assert_eq!(parent_pid("42 superfluid S 7"), None);
    }

    #[test]
    fn status_lines_are_read_in_kib() {
        let status = "Name:\tsuperfluid\nVmRSS:\t  123456 kB\nRssFile:\t   1000 kB\n";
        assert_eq!(status_kib(status, "VmRSS:"), Some(123_456));
        assert_eq!(status_kib(status, "RssFile:"), Some(1000));
        assert_eq!(status_kib(status, "RssShmem:"), None);
    }

    #[test]
    fn this_process_has_a_resident_size() {
        let me = resident(std::process::id()).expect("/proc/self/status");
        assert!(me.rss > 0 && me.rss_file <= me.rss);
    }
}
