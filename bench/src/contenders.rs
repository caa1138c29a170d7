//! The processes `bench serve` measures, started before the first round,
//! and the targets their requests go to.

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
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
    serve: ServerProcess,
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
}

/// The pairs the report compares, `(of, to)`, by contender name; those
/// whose contenders did not run are left out.
pub const PAIRS: [(&str, &str); 7] = [
    ("superfluid_serve", "in_process"),
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
