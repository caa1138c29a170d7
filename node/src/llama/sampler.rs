//! Builds a llama.cpp sampler chain from the request's [`Sampling`], and
//! holds it to the request's output constraint.

use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_2::token::data_array::LlamaTokenDataArray;
use llama_cpp_2::token::logit_bias::LlamaLogitBias;
use llama_cpp_2::token::LlamaToken;
use llguidance::Matcher;
use superfluid_proto::Sampling;

use super::draw::Draw;
use crate::schedule::BackendError;
use crate::scoring::{self, Scores};

/// Picks each next token of one generation.
pub enum Picker {
    /// Plain greedy decoding: the most likely token, read straight from the
    /// logits (the sampler chain would first copy the whole vocabulary).
    Argmax,
    /// A llama.cpp sampler chain; it accepts each token it samples. The
    /// random pick, when the sampling has one, is `draw`'s.
    Chain {
        /// The request's sampling, up to the random pick.
        chain: LlamaSampler,
        /// The random pick; `None` when the chain picks greedily.
        draw: Option<Draw>,
    },
    /// A chain that picks only among the tokens `matcher` allows. The
    /// matcher stays on the Rust side, rather than inside the chain as a
    /// llama.cpp sampler, so that a grammar failing mid-generation fails
    /// the generation instead of silently sampling unconstrained.
    Constrained {
        /// Where the output stands in the grammar.
        matcher: Box<Matcher>,
        /// The request's sampling, up to the random pick.
        chain: LlamaSampler,
        /// The random pick; `None` when the chain picks greedily.
        draw: Option<Draw>,
    },
    /// Any of the above that also scores each pick (the request asked for
    /// log probabilities).
    Scored(Box<Scored>),
}

/// A picker that scores what it picks: the chain is split where the scores
/// are taken, after the logit biases and penalties and before top-k,
/// top-p, min-p and temperature, so that they are the model's
/// probabilities as the penalties left them, whatever the randomness.
pub struct Scored {
    /// The constraint, if any: scores are over the tokens it allows.
    matcher: Option<Matcher>,
    /// Logit biases and penalties; `None` when the request has neither.
    pre: Option<LlamaSampler>,
    /// The rest of the chain, up to the random pick (or the greedy one).
    post: LlamaSampler,
    /// The random pick; `None` when `post` picks greedily.
    draw: Option<Draw>,
    /// How many alternatives to report.
    top: usize,
    /// The candidates after `pre`, reused from step to step.
    seen: Vec<(u32, f32)>,
    /// The last pick's scores, until taken.
    last: Option<(u32, Scores)>,
}

impl Picker {
    /// The picker for `sampling`.
    pub fn new(sampling: &Sampling, n_vocab: i32) -> Self {
        let plain = sampling.temperature.is_finite()
            && sampling.temperature <= 0.0
            && sampling.logit_bias.is_empty()
            && (sampling.penalty_last_n == 0
                || (sampling.repetition_penalty == 1.0
                    && sampling.frequency_penalty == 0.0
                    && sampling.presence_penalty == 0.0));
        if plain {
            Picker::Argmax
        } else {
            let (chain, draw) = build(sampling, n_vocab);
            Picker::Chain { chain, draw }
        }
    }

    /// [`Picker::new`]'s sampling, held to `matcher`.
    pub fn constrained(sampling: &Sampling, n_vocab: i32, matcher: Matcher) -> Self {
        let (chain, draw) = build(sampling, n_vocab);
        Picker::Constrained {
            matcher: Box::new(matcher),
            chain,
            draw,
        }
    }

    /// [`Picker::new`] or [`Picker::constrained`]'s sampling that also
    /// scores each pick with `top` alternatives (see [`Picker::take_scores`]).
    pub fn scored(sampling: &Sampling, n_vocab: i32, matcher: Option<Matcher>, top: u8) -> Self {
        let (pre, post, draw) = stages(sampling, n_vocab);
        Picker::Scored(Box::new(Scored {
            matcher,
            pre: (!pre.is_empty()).then(|| LlamaSampler::chain_simple(pre)),
            post: LlamaSampler::chain_simple(post),
            draw,
            top: usize::from(top),
            seen: Vec::new(),
            last: None,
        }))
    }

    /// Takes up a generation another node started: `generated` are the
    /// tokens it produced (the last ones of this generation's prompt). The
    /// penalties count them as picked, the constraint moves past them, and
    /// the random draws go on from the position after them, so the picks
    /// that follow are the ones the first node would have made.
    ///
    /// # Errors
    /// [`BackendError::Constraint`] when the constraint does not accept them.
    pub fn resume(&mut self, generated: &[u32]) -> Result<(), BackendError> {
        if generated.is_empty() {
            return Ok(());
        }
        let tokens = || {
            generated
                .iter()
                .filter_map(|&t| i32::try_from(t).ok().map(LlamaToken))
        };
        let skip = |draw: &mut Option<Draw>| {
            if let Some(draw) = draw {
                draw.skip(generated.len());
            }
        };
        match self {
            Picker::Argmax => {}
            Picker::Chain { chain, draw } => {
                chain.accept_many(tokens());
                skip(draw);
            }
            Picker::Constrained {
                matcher,
                chain,
                draw,
            } => {
                chain.accept_many(tokens());
                skip(draw);
                replay(matcher, generated)?;
            }
            Picker::Scored(scored) => {
                if let Some(pre) = &mut scored.pre {
                    pre.accept_many(tokens());
                }
                scored.post.accept_many(tokens());
                skip(&mut scored.draw);
                if let Some(matcher) = &mut scored.matcher {
                    replay(matcher, generated)?;
                }
            }
        }
        Ok(())
    }

    /// The scores of the token last picked, if this picker scores and
    /// `token` is that token.
    pub fn take_scores(&mut self, token: u32) -> Option<Scores> {
        match self {
            Picker::Scored(scored) => scored
                .last
                .take()
                .filter(|(picked, _)| *picked == token)
                .map(|(_, scores)| scores),
            _ => None,
        }
    }

    /// The next token from the logits at `batch_index` of the last decode,
    /// which must have been requested for that index.
    ///
    /// # Errors
    /// [`BackendError::Constraint`] when the constraint cannot say which
    /// tokens may follow, or none of them can be picked.
    pub fn pick(
        &mut self,
        ctx: &LlamaContext<'_>,
        batch_index: i32,
    ) -> Result<LlamaToken, BackendError> {
        Ok(match self {
            Picker::Argmax => {
                let logits = ctx.get_logits_ith(batch_index);
                let mut best = 0;
                for (i, &logit) in logits.iter().enumerate() {
                    if logit > logits[best] {
                        best = i;
                    }
                }
                LlamaToken(i32::try_from(best).unwrap_or(0))
            }
            Picker::Chain { chain, draw: None } => chain.sample(ctx, batch_index),
            Picker::Chain {
                chain,
                draw: Some(draw),
            } => {
                let mut candidates =
                    LlamaTokenDataArray::from_iter(ctx.candidates_ith(batch_index), false);
                let token = finish(&mut candidates, chain, Some(draw))?;
                chain.accept(token);
                token
            }
            Picker::Constrained {
                matcher,
                chain,
                draw,
            } => pick_allowed(matcher, chain, draw.as_mut(), ctx, batch_index)?,
            Picker::Scored(scored) => scored.pick(ctx, batch_index)?,
        })
    }
}

impl Scored {
    /// Picks as the unscored pickers do, keeping the pick's scores.
    fn pick(
        &mut self,
        ctx: &LlamaContext<'_>,
        batch_index: i32,
    ) -> Result<LlamaToken, BackendError> {
        let failed = |reason: String| BackendError::Constraint {
            source: reason.into(),
        };
        let mut candidates = LlamaTokenDataArray::from_iter(ctx.candidates_ith(batch_index), false);
        if let Some(matcher) = &mut self.matcher {
            let mask = matcher
                .compute_mask_or_eos()
                .map_err(|e| BackendError::Constraint { source: e.into() })?;
            candidates
                .data
                .retain(|c| u32::try_from(c.id().0).is_ok_and(|id| mask.is_allowed(id)));
            if candidates.data.is_empty() {
                return Err(failed(
                    "the grammar allows no token of this model's vocabulary here".into(),
                ));
            }
        }
        if let Some(pre) = &mut self.pre {
            candidates.apply_sampler(pre);
        }
        self.seen.clear();
        self.seen.extend(
            candidates
                .data
                .iter()
                .filter_map(|c| Some((u32::try_from(c.id().0).ok()?, c.logit()))),
        );
        let token = finish(&mut candidates, &mut self.post, self.draw.as_mut())?;
        if let Some(pre) = &mut self.pre {
            pre.accept(token);
        }
        self.post.accept(token);
        let id =
            u32::try_from(token.0).map_err(|_| failed(format!("token {} is negative", token.0)))?;
        if let Some(matcher) = &mut self.matcher {
            if !matcher.is_stopped() {
                matcher
                    .consume_token(id)
                    .map_err(|e| BackendError::Constraint { source: e.into() })?;
            }
        }
        self.last = Some((id, scoring::score(&self.seen, id, self.top)));
        Ok(token)
    }
}

/// Samples with `chain` among the tokens `matcher` allows next (once the
/// grammar is complete, only the end of generation), and moves the
/// matcher past the token picked.
fn pick_allowed(
    matcher: &mut Matcher,
    chain: &mut LlamaSampler,
    draw: Option<&mut Draw>,
    ctx: &LlamaContext<'_>,
    batch_index: i32,
) -> Result<LlamaToken, BackendError> {
    let failed = |reason: String| BackendError::Constraint {
        source: reason.into(),
    };
    let mask = matcher
        .compute_mask_or_eos()
        .map_err(|e| BackendError::Constraint { source: e.into() })?;
    let mut candidates = LlamaTokenDataArray::from_iter(ctx.candidates_ith(batch_index), false);
    candidates
        .data
        .retain(|c| u32::try_from(c.id().0).is_ok_and(|id| mask.is_allowed(id)));
    if candidates.data.is_empty() {
        return Err(failed(
            "the grammar allows no token of this model's vocabulary here".into(),
        ));
    }
    let token = finish(&mut candidates, chain, draw)?;
    chain.accept(token);
    if !matcher.is_stopped() {
        let id =
            u32::try_from(token.0).map_err(|_| failed(format!("token {} is negative", token.0)))?;
        matcher
            .consume_token(id)
            .map_err(|e| BackendError::Constraint { source: e.into() })?;
    }
    Ok(token)
}

/// Moves `matcher` past tokens generated under it on another node.
fn replay(matcher: &mut Matcher, generated: &[u32]) -> Result<(), BackendError> {
    for &token in generated {
        if matcher.is_stopped() {
            break;
        }
        matcher
            .consume_token(token)
            .map_err(|e| BackendError::Constraint { source: e.into() })?;
    }
    Ok(())
}

/// Applies `chain` to `candidates`, then `draw`'s random pick if there is
/// one, and returns the token picked (not yet accepted by the chain).
fn finish(
    candidates: &mut LlamaTokenDataArray,
    chain: &mut LlamaSampler,
    draw: Option<&mut Draw>,
) -> Result<LlamaToken, BackendError> {
    candidates.apply_sampler(chain);
    let picked = match draw {
        Some(draw) => draw.pick(candidates),
        None => candidates.selected_token(),
    };
    picked.ok_or_else(|| BackendError::Constraint {
        source: "the sampler picked no token".into(),
    })
}

/// The chain for one generation: logit biases, penalties, top-k, top-p,
/// min-p and temperature, and the random pick after it ([`Draw`], seeded
/// per position of the answer); a greedy pick ending the chain when
/// `temperature <= 0`.
/// Disabled stages are left out so the common cases stay cheap.
/// Values that are not finite count as "disabled".
pub fn build(sampling: &Sampling, n_vocab: i32) -> (LlamaSampler, Option<Draw>) {
    let (mut chain, post, draw) = stages(sampling, n_vocab);
    chain.extend(post);
    (LlamaSampler::chain_simple(chain), draw)
}

/// [`build`]'s stages in two parts: the logit biases and penalties, which
/// change the distribution, and the rest, which pick from it; and the
/// random pick, if any.
fn stages(
    sampling: &Sampling,
    n_vocab: i32,
) -> (Vec<LlamaSampler>, Vec<LlamaSampler>, Option<Draw>) {
    let mut pre = Vec::with_capacity(2);
    let mut chain = Vec::with_capacity(5);
    let biases: Vec<LlamaLogitBias> = sampling
        .logit_bias
        .iter()
        .filter_map(|&(id, bias)| {
            let id = i32::try_from(id).ok().filter(|&id| id < n_vocab)?;
            bias.is_finite()
                .then(|| LlamaLogitBias::new(LlamaToken(id), bias))
        })
        .collect();
    if !biases.is_empty() {
        pre.push(LlamaSampler::logit_bias(n_vocab, &biases));
    }
    let finite_or = |v: f32, off: f32| if v.is_finite() { v } else { off };
    let repeat = finite_or(sampling.repetition_penalty, 1.0);
    let repeat = if repeat > 0.0 { repeat } else { 1.0 };
    let frequency = finite_or(sampling.frequency_penalty, 0.0);
    let presence = finite_or(sampling.presence_penalty, 0.0);
    let penalised = repeat != 1.0 || frequency != 0.0 || presence != 0.0;
    if penalised && sampling.penalty_last_n > 0 {
        let last_n = i32::try_from(sampling.penalty_last_n).unwrap_or(i32::MAX);
        pre.push(LlamaSampler::penalties(
            n_vocab, last_n, repeat, frequency, presence,
        ));
    }
    let temperature = finite_or(sampling.temperature, 0.0);
    if temperature <= 0.0 {
        chain.push(LlamaSampler::greedy());
        return (pre, chain, None);
    }
    if sampling.top_k > 0 {
        let k = i32::try_from(sampling.top_k)
            .unwrap_or(i32::MAX)
            .min(n_vocab.max(1));
        chain.push(LlamaSampler::top_k(k));
    }
    if sampling.top_p > 0.0 && sampling.top_p < 1.0 {
        chain.push(LlamaSampler::top_p(sampling.top_p, 1));
    }
    if sampling.min_p > 0.0 {
        chain.push(LlamaSampler::min_p(sampling.min_p, 1));
    }
    chain.push(LlamaSampler::temp(temperature));
    (pre, chain, Some(Draw::new(sampling.seed)))
}
