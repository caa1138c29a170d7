//! The real fleet: a head and two llama.cpp nodes in this process, joined
//! over loopback Link F as `superfluid serve` joins its one node, serving a
//! small multi-turn chat workload over HTTP. A fresh fleet (cold caches)
//! for each policy.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use futures::StreamExt;
use llama_cpp_2::llama_backend::LlamaBackend;
use superfluid_head::codec::{ChatMessage, ModelCodec};
use superfluid_head::routing::RoutePolicy;
use superfluid_head::server::{HeadConfig, RunningHead};
use superfluid_link::{allow_only, Identity};
use superfluid_node::agent::{self, AgentConfig, AgentError};
use superfluid_node::llama::{LlamaConfig, LlamaEngine};
use tokio::task::JoinHandle;

use super::chat::{self, Reply};
use super::report::{RealPolicy, RealReport};
use super::rng::Rng;
use super::text;
use crate::stats::percentile;

/// The real fleet's setup and workload.
#[derive(Debug, Clone)]
pub struct Setup {
    pub model: PathBuf,
    pub seed: u64,
    pub nodes: usize,
    pub slots: u32,
    pub ctx: u32,
    pub threads: u32,
    pub conversations: usize,
    pub turns: usize,
    pub max_tokens: u32,
    pub in_flight: usize,
    /// Minimum words of each system prompt.
    pub system_words: Vec<usize>,
    /// Minimum words of the notes in each conversation's first message.
    pub notes_words: usize,
}

const JOIN_TIMEOUT: Duration = Duration::from_secs(60);

/// A head and its nodes; stopped on drop.
struct Fleet {
    head: RunningHead,
    agents: Vec<JoinHandle<Result<(), AgentError>>>,
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for agent in &self.agents {
            agent.abort();
        }
        self.head.close_link();
        self.head.http.abort();
    }
}

async fn start(
    backend: &Arc<LlamaBackend>,
    setup: &Setup,
    sha256: &str,
    policy: RoutePolicy,
) -> Result<Fleet> {
    let identities = (0..setup.nodes)
        .map(|_| Identity::generate())
        .collect::<Result<Vec<_>, _>>()
        .context("making the nodes' keys")?;
    let head = superfluid_head::server::start(
        backend,
        HeadConfig {
            http: SocketAddr::from(([127, 0, 0, 1], 0)),
            link: SocketAddr::from(([127, 0, 0, 1], 0)),
            models: vec![setup.model.clone()],
            identity: Identity::generate().context("making the head's key")?,
            authorizer: allow_only(identities.iter().map(Identity::fingerprint)),
            membership: None,
            route_policy: policy,
            keys: Default::default(),
            browser: Default::default(),
            metrics_key: None,
            max_connections: superfluid_head::server::connections::DEFAULT_MAX_CONNECTIONS,
            // The workload decides the load; nothing is refused.
            max_queue: Some(u32::MAX),
            ollama_port: None,
            sessions: None,
            placement: Default::default(),
        },
    )
    .await
    .context("starting the head")?;
    let mut fleet = Fleet {
        head,
        agents: Vec::new(),
    };
    for (i, identity) in identities.into_iter().enumerate() {
        let engine = LlamaEngine::start(
            backend.clone(),
            LlamaConfig {
                model_path: setup.model.clone(),
                slots: setup.slots,
                ctx: setup.ctx,
                threads: setup.threads,
                prefill_chunk: 512,
                shared_kv: false,
                model_id: None,
                offload: Default::default(),
            },
        )
        .context("starting a node's engine")?;
        let config = AgentConfig {
            head_addrs: vec![fleet.head.link_addr],
            head_fingerprint: fleet.head.fingerprint,
            identity,
            name: format!("node-{}", char::from(b'a' + i as u8)),
            join_token: None,
            model_sha256: Some(sha256.to_owned()),
            credential_dir: None,
            join_only: false,
        };
        fleet
            .agents
            .push(tokio::spawn(agent::run(Arc::new(engine), config)));
    }
    let deadline = Instant::now() + JOIN_TIMEOUT;
    while fleet.head.fleet.nodes().len() < setup.nodes {
        if let Some(done) = fleet.agents.iter().position(JoinHandle::is_finished) {
            bail!("node {done} stopped before joining the head");
        }
        if Instant::now() > deadline {
            bail!("the nodes did not join the head within {JOIN_TIMEOUT:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(fleet)
}

/// One request of the workload as it ran.
struct Record {
    sent: Instant,
    done: Instant,
    /// The prompt as the head tokenizes it.
    prompt: Vec<u32>,
    /// The answer, tokenized as plain text.
    answer: Vec<u32>,
    reply: Reply,
}

struct Workload<'a> {
    setup: &'a Setup,
    codec: &'a ModelCodec,
    systems: &'a [String],
    client: reqwest::Client,
    base: String,
    model_id: String,
}

impl Workload<'_> {
    fn tokens(&self, messages: &[(String, String)]) -> Result<Vec<u32>> {
        let messages: Vec<ChatMessage> = messages
            .iter()
            .map(|(role, content)| ChatMessage::new(role.as_str(), content.as_str()))
            .collect();
        Ok(self.codec.tokenize(&self.codec.render_chat(&messages)?))
    }

    async fn conversation(&self, i: usize) -> Result<Vec<Record>> {
        let system = &self.systems[i % self.systems.len()];
        let mut messages = vec![("system".to_owned(), system.clone())];
        let mut rng = Rng::derive(self.setup.seed, 300 + i as u64);
        let mut records = Vec::new();
        for turn in 0..self.setup.turns {
            messages.push((
                "user".into(),
                text::user_message(&mut rng, i, turn, self.setup.notes_words),
            ));
            let prompt = self.tokens(&messages)?;
            let sent = Instant::now();
            let reply = chat::complete(
                &self.client,
                &self.base,
                &self.model_id,
                &messages,
                self.setup.max_tokens,
            )
            .await
            .with_context(|| format!("conversation {i}, turn {turn}"))?;
            let done = Instant::now();
            messages.push(("assistant".into(), reply.content.clone()));
            records.push(Record {
                sent,
                done,
                prompt,
                answer: self.codec.tokenize_plain(&reply.content),
                reply,
            });
        }
        Ok(records)
    }
}

/// The longest prefix of `prompt` that an earlier request (one that ended
/// before this one was sent) held as prompt then answer; at most all but
/// one token, as an engine always computes one.
fn shareable(record: &Record, all: &[Record]) -> usize {
    let best = all
        .iter()
        .filter(|other| !std::ptr::eq(*other, record) && other.done <= record.sent)
        .map(|other| {
            let held = other.prompt.iter().chain(&other.answer);
            record
                .prompt
                .iter()
                .zip(held)
                .take_while(|(a, b)| a == b)
                .count()
        })
        .max()
        .unwrap_or(0);
    best.min(record.prompt.len().saturating_sub(1))
}

async fn measure(
    backend: &Arc<LlamaBackend>,
    setup: &Setup,
    codec: &ModelCodec,
    systems: &[String],
    sha256: &str,
    policy: RoutePolicy,
) -> Result<RealPolicy> {
    let fleet = start(backend, setup, sha256, policy).await?;
    let work = Workload {
        setup,
        codec,
        systems,
        client: reqwest::Client::new(),
        base: format!("http://{}", fleet.head.http_addr),
        model_id: codec.id().to_owned(),
    };
    let started = Instant::now();
    let mut runs = futures::stream::iter(0..setup.conversations)
        .map(|i| work.conversation(i))
        .buffer_unordered(setup.in_flight.max(1));
    let mut records = Vec::new();
    while let Some(run) = runs.next().await {
        records.extend(run?);
    }
    let wall_s = started.elapsed().as_secs_f64();
    drop(runs);
    drop(fleet);
    tokio::time::sleep(Duration::from_millis(200)).await;

    records.sort_by_key(|r| r.sent);
    let mut ttft: Vec<f64> = records
        .iter()
        .map(|r| r.reply.ttft.as_secs_f64() * 1e3)
        .collect();
    let shareable_tokens: u64 = records.iter().map(|r| shareable(r, &records) as u64).sum();
    let cached_tokens: u64 = records
        .iter()
        .map(|r| u64::from(r.reply.cached_tokens))
        .sum();
    let mut per_node = std::collections::BTreeMap::new();
    for r in &records {
        *per_node.entry(r.reply.node.clone()).or_insert(0usize) += 1;
    }
    Ok(RealPolicy {
        policy: policy.as_str().into(),
        requests: records.len(),
        wall_s,
        ttft_p50_ms: percentile(&mut ttft, 0.5),
        ttft_p90_ms: percentile(&mut ttft, 0.9),
        prompt_tokens: records
            .iter()
            .map(|r| u64::from(r.reply.prompt_tokens))
            .sum(),
        cached_tokens,
        shareable_tokens,
        cached_share: cached_tokens as f64 / (shareable_tokens.max(1)) as f64,
        completion_tokens: records
            .iter()
            .map(|r| u64::from(r.reply.completion_tokens))
            .sum(),
        token_count_mismatches: records
            .iter()
            .filter(|r| r.prompt.len() != r.reply.prompt_tokens as usize)
            .count(),
        requests_per_node: per_node,
    })
}

/// Runs the workload on a fresh fleet for each policy.
pub async fn run(backend: &Arc<LlamaBackend>, setup: &Setup) -> Result<RealReport> {
    let codec = ModelCodec::load(backend, &setup.model).context("loading the tokenizer")?;
    let sha256 = superfluid_link::digest::sha256_file_async(&setup.model)
        .await
        .with_context(|| format!("reading {} to hash it", setup.model.display()))?;
    let mut rng = Rng::derive(setup.seed, 3);
    let systems: Vec<String> = setup
        .system_words
        .iter()
        .enumerate()
        .map(|(i, &words)| text::system_prompt(&mut rng, i, words))
        .collect();
    let system_prompt_tokens = systems
        .iter()
        .map(|s| {
            let m = [ChatMessage::new("system", s.as_str())];
            Ok(codec.tokenize(&codec.render_chat(&m)?).len())
        })
        .collect::<Result<Vec<_>>>()?;
    let mut policies = Vec::new();
    for policy in [RoutePolicy::LeastTtft, RoutePolicy::RoundRobin] {
        let measured = measure(backend, setup, &codec, &systems, &sha256, policy)
            .await
            .with_context(|| format!("the real fleet with {policy}"))?;
        policies.push(measured);
    }
    Ok(RealReport {
        model: codec.id().to_owned(),
        nodes: setup.nodes,
        slots: setup.slots,
        ctx: setup.ctx,
        threads: setup.threads,
        conversations: setup.conversations,
        turns: setup.turns,
        max_tokens: setup.max_tokens,
        in_flight: setup.in_flight,
        system_prompt_tokens,
        first_message_notes_words: setup.notes_words,
        policies,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(prompt: &[u32], answer: &[u32], sent: Instant, done: Instant) -> Record {
        Record {
            sent,
            done,
            prompt: prompt.to_vec(),
            answer: answer.to_vec(),
            reply: Reply {
                ttft: Duration::ZERO,
                content: String::new(),
                prompt_tokens: prompt.len() as u32,
                cached_tokens: 0,
                completion_tokens: answer.len() as u32,
                node: String::new(),
            },
        }
    }

    #[test]
    fn shareable_counts_earlier_prompts_and_answers_only() {
        let t = Instant::now();
        let later = t + Duration::from_secs(1);
        let first = record(&[1, 2, 3], &[4, 5], t, t);
        // The next turn carries the first prompt, its answer, and more.
        let next = record(&[1, 2, 3, 4, 5, 6, 7], &[], later, later);
        // Sent before the first ended: nothing was shareable yet.
        let early = record(&[1, 2, 3, 9], &[], t - Duration::from_secs(1), t);
        let all = [first, next, early];
        assert_eq!(shareable(&all[1], &all), 5);
        assert_eq!(shareable(&all[2], &all), 0);
        // At most all but one token of a prompt.
        let same = record(&[1, 2, 3], &[], later, later);
        assert_eq!(shareable(&same, &all), 2);
    }
}
