//! Builds a llama.cpp sampler chain from the request's [`Sampling`], and
//! holds it to the request's output constraint.

use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_2::token::data_array::LlamaTokenDataArray;
use llama_cpp_2::token::logit_bias::LlamaLogitBias;
use llama_cpp_2::token::LlamaToken;
use llguidance::Matcher;
use superfluid_proto::Sampling;

use crate::schedule::BackendError;

/// Picks each next token of one generation.
pub enum Picker {
    /// Plain greedy decoding: the most likely token, read straight from the
    /// logits (the sampler chain would first copy the whole vocabulary).
    Argmax,
    /// A llama.cpp sampler chain; it accepts each token it samples.
    Chain(LlamaSampler),
    /// A chain that picks only among the tokens `matcher` allows. The
    /// matcher stays on the Rust side, rather than inside the chain as a
    /// llama.cpp sampler, so that a grammar failing mid-generation fails
    /// the generation instead of silently sampling unconstrained.
    Constrained {
        /// Where the output stands in the grammar.
        matcher: Box<Matcher>,
        /// The request's sampling.
        chain: LlamaSampler,
    },
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
            Picker::Chain(build(sampling, n_vocab))
        }
    }

    /// [`Picker::new`]'s sampling, held to `matcher`.
    pub fn constrained(sampling: &Sampling, n_vocab: i32, matcher: Matcher) -> Self {
        Picker::Constrained {
            matcher: Box::new(matcher),
            chain: build(sampling, n_vocab),
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
            Picker::Chain(sampler) => sampler.sample(ctx, batch_index),
            Picker::Constrained { matcher, chain } => {
                pick_allowed(matcher, chain, ctx, batch_index)?
            }
        })
    }
}

/// Samples with `chain` among the tokens `matcher` allows next (once the
/// grammar is complete, only the end of generation), and moves the
/// matcher past the token picked.
fn pick_allowed(
    matcher: &mut Matcher,
    chain: &mut LlamaSampler,
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
    candidates.apply_sampler(chain);
    let token = candidates
        .selected_token()
        .ok_or_else(|| failed("the sampler picked no token".into()))?;
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

/// The chain for one generation: logit biases, penalties, top-k, top-p,
/// min-p and temperature, then a seeded random pick; greedy when
/// `temperature <= 0`.
/// Disabled stages are left out so the common cases stay cheap.
/// Values that are not finite count as "disabled".
pub fn build(sampling: &Sampling, n_vocab: i32) -> LlamaSampler {
    let mut chain = Vec::with_capacity(7);
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
        chain.push(LlamaSampler::logit_bias(n_vocab, &biases));
    }
    let finite_or = |v: f32, off: f32| if v.is_finite() { v } else { off };
    let repeat = finite_or(sampling.repetition_penalty, 1.0);
    let repeat = if repeat > 0.0 { repeat } else { 1.0 };
    let frequency = finite_or(sampling.frequency_penalty, 0.0);
    let presence = finite_or(sampling.presence_penalty, 0.0);
    let penalised = repeat != 1.0 || frequency != 0.0 || presence != 0.0;
    if penalised && sampling.penalty_last_n > 0 {
        let last_n = i32::try_from(sampling.penalty_last_n).unwrap_or(i32::MAX);
        chain.push(LlamaSampler::penalties(
            n_vocab, last_n, repeat, frequency, presence,
        ));
    }
    let temperature = finite_or(sampling.temperature, 0.0);
    if temperature <= 0.0 {
        chain.push(LlamaSampler::greedy());
        return LlamaSampler::chain_simple(chain);
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
    chain.push(LlamaSampler::dist(sampling.seed));
    LlamaSampler::chain_simple(chain)
}
