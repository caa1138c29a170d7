//! `bench serve`'s structured-output step: the same chat requests to one
//! `superfluid serve`, with a JSON schema in `response_format` and without,
//! paired request by request: what constraining the tokens to the schema
//! costs in decode tokens/s.

use anyhow::{Context, Result};
use serde::Serialize;
use serde_json::{json, Value};

use crate::apis::Api;
use crate::contenders::serve_args;
use crate::http;
use crate::stats::{paired_median_difference, RequestTiming, Spread};
use crate::ServeArgs;

/// Replies shorter than this many tokens give no decode rate worth pairing
/// (a rate needs tokens after the first, over the time they took).
pub(crate) const MIN_TOKENS: u32 = 8;

/// The characters the prompts ask about, one per request of a round.
const SUBJECTS: [&str; 8] = [
    "a lighthouse keeper",
    "a lost robot",
    "a dragon who bakes bread",
    "a chess champion",
    "a deep-sea diver",
    "a time-travelling cat",
    "a gardener on Mars",
    "a violin maker",
];

/// The schema every constrained request sends: an object with required
/// fields, an integer, an array of an enum and no other properties. The
/// strings are bounded so the JSON closes within `--max-tokens` 128.
pub fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 40},
            "age": {"type": "integer"},
            "traits": {
                "type": "array",
                "items": {"type": "string", "enum": ["brave", "kind", "clever", "curious", "grumpy", "shy"]},
                "maxItems": 4
            },
            "story": {"type": "string", "maxLength": 240}
        },
        "required": ["name", "age", "traits", "story"],
        "additionalProperties": false
    })
}

/// Whether `text` is an object the schema accepts (the checks the schema
/// makes, written out: the bench has no validator of its own).
pub fn matches_schema(text: &str) -> bool {
    let Ok(Value::Object(fields)) = serde_json::from_str::<Value>(text) else {
        return false;
    };
    let allowed = ["brave", "kind", "clever", "curious", "grumpy", "shy"];
    fields.len() == 4
        && fields
            .get("name")
            .and_then(Value::as_str)
            .is_some_and(|n| n.chars().count() <= 40)
        && fields.get("age").is_some_and(|a| a.is_i64() || a.is_u64())
        && fields
            .get("story")
            .and_then(Value::as_str)
            .is_some_and(|s| s.chars().count() <= 240)
        && fields
            .get("traits")
            .and_then(Value::as_array)
            .is_some_and(|t| {
                t.len() <= 4
                    && t.iter()
                        .all(|v| v.as_str().is_some_and(|s| allowed.contains(&s)))
            })
}

/// The prompt of request `n` of round `round`: fresh in every round.
fn prompt(round: u32, n: usize) -> String {
    let subject = SUBJECTS[n % SUBJECTS.len()];
    format!(
        "Character {round}-{n}. Invent {subject} for a story: a name, an age, a few traits \
         and a short story about them. Answer in JSON."
    )
}

/// The streamed greedy chat request for `prompt`, constrained to
/// [`schema`] when `constrained`.
pub fn request(model: &str, prompt: &str, max_tokens: u32, constrained: bool) -> Value {
    let (_, mut body) = Api::OpenAiChat.request(model, prompt, max_tokens);
    if constrained {
        body["response_format"] = json!({
            "type": "json_schema",
            "json_schema": {"name": "character", "schema": schema(), "strict": true}
        });
    }
    body
}

/// What the structured-output step measured.
#[derive(Debug, Serialize)]
pub struct StructuredReport {
    /// Request pairs sent (each prompt once with the schema, once without).
    pub pairs: usize,
    /// Pairs left out of the ratios: a reply under 8 tokens on either side.
    pub pairs_too_short: usize,
    /// Constrained replies that parsed as an object of the schema.
    pub constrained_valid: usize,
    /// Decode tokens/s over all requests of each side: tokens after the
    /// first over the time they took.
    pub constrained_decode_tokens_per_s: f64,
    pub unconstrained_decode_tokens_per_s: f64,
    /// Mean completion tokens per reply on each side.
    pub constrained_mean_tokens: f64,
    pub unconstrained_mean_tokens: f64,
    /// The quartiles of constrained / unconstrained decode tokens/s, pair
    /// by pair.
    pub decode_paired: Spread,
    /// The median over pairs of constrained TTFT minus unconstrained (the
    /// head compiles the schema before it asks the node).
    pub ttft_paired_overhead_ms: f64,
}

/// Tokens after the first over the time they took.
pub(crate) fn decode_rate(t: &RequestTiming) -> f64 {
    f64::from(t.tokens.saturating_sub(1)) / t.decode.as_secs_f64().max(1e-9)
}

fn overall_rate(timings: &[RequestTiming]) -> f64 {
    let tokens: u32 = timings.iter().map(|t| t.tokens.saturating_sub(1)).sum();
    let secs: f64 = timings.iter().map(|t| t.decode.as_secs_f64()).sum();
    f64::from(tokens) / secs.max(1e-9)
}

fn mean_tokens(timings: &[RequestTiming]) -> f64 {
    let tokens: u32 = timings.iter().map(|t| t.tokens).sum();
    f64::from(tokens) / (timings.len().max(1) as f64)
}

/// Summarises pairs `(constrained, unconstrained)` and how many constrained
/// replies matched the schema.
pub fn summarise(pairs: &[(RequestTiming, RequestTiming)], valid: usize) -> StructuredReport {
    let kept: Vec<_> = pairs
        .iter()
        .filter(|(c, u)| c.tokens >= MIN_TOKENS && u.tokens >= MIN_TOKENS)
        .collect();
    let rates = |side: fn(&(RequestTiming, RequestTiming)) -> &RequestTiming| -> Vec<f64> {
        kept.iter().map(|p| decode_rate(side(p))).collect()
    };
    let ttft = |side: fn(&(RequestTiming, RequestTiming)) -> &RequestTiming| -> Vec<f64> {
        pairs
            .iter()
            .map(|p| side(p).ttft.as_secs_f64() * 1e3)
            .collect()
    };
    let constrained: Vec<RequestTiming> = pairs.iter().map(|p| p.0).collect();
    let unconstrained: Vec<RequestTiming> = pairs.iter().map(|p| p.1).collect();
    StructuredReport {
        pairs: pairs.len(),
        pairs_too_short: pairs.len() - kept.len(),
        constrained_valid: valid,
        constrained_decode_tokens_per_s: overall_rate(&constrained),
        unconstrained_decode_tokens_per_s: overall_rate(&unconstrained),
        constrained_mean_tokens: mean_tokens(&constrained),
        unconstrained_mean_tokens: mean_tokens(&unconstrained),
        decode_paired: Spread::of_ratios(&rates(|p| &p.0), &rates(|p| &p.1)),
        ttft_paired_overhead_ms: paired_median_difference(&ttft(|p| &p.0), &ttft(|p| &p.1)),
    }
}

/// Starts a `superfluid serve` of its own and sends `--alone` prompts per
/// round, each with the schema and without, the order alternating.
pub async fn run(args: &ServeArgs, client: &reqwest::Client) -> Result<StructuredReport> {
    let server = http::start(&args.superfluid, &serve_args(args, None))
        .await
        .context("starting superfluid serve for structured output")?;
    let model = superfluid_proto::model_id_from_path(&args.model);
    let url = format!("{}/v1/chat/completions", server.base);
    let send = |prompt: String, constrained: bool| {
        let body = request(&model, &prompt, args.max_tokens, constrained);
        let url = url.clone();
        async move {
            http::stream(client, Api::OpenAiChat, &url, &body, None)
                .await
                .with_context(|| format!("structured output, constrained {constrained}"))
        }
    };
    // Warm both paths (the first schema compiled, the first chat rendered).
    send(prompt(999, 0), true).await?;
    send(prompt(999, 1), false).await?;
    let mut pairs = Vec::new();
    let mut valid = 0;
    for round in 0..args.rounds {
        eprintln!(
            "bench: structured output, round {} of {}: {} prompts with a schema and without",
            round + 1,
            args.rounds,
            args.alone
        );
        for n in 0..args.alone as usize {
            let text = prompt(round + 100, n);
            let constrained_first = (round as usize + n) % 2 == 0;
            let (c, u) = if constrained_first {
                let c = send(text.clone(), true).await?;
                (c, send(text, false).await?)
            } else {
                let u = send(text.clone(), false).await?;
                (send(text, true).await?, u)
            };
            valid += usize::from(matches_schema(&c.text));
            pairs.push((c.timing, u.timing));
        }
    }
    Ok(summarise(&pairs, valid))
}

/// The step's lines of `bench serve`'s table.
pub fn print_table(r: &StructuredReport) {
    println!(
        "structured output: decode {:.1} tok/s with the schema, {:.1} without ({:.1} and {:.1} tokens a reply; {} of {} replies match the schema)",
        r.constrained_decode_tokens_per_s,
        r.unconstrained_decode_tokens_per_s,
        r.constrained_mean_tokens,
        r.unconstrained_mean_tokens,
        r.constrained_valid,
        r.pairs
    );
    let p = &r.decode_paired;
    println!(
        "structured / free text: paired decode x{:.3} (quartiles x{:.3} to x{:.3}, {} pairs, {} too short), ttft paired {:+.1} ms",
        p.p50, p.p25, p.p75, p.n, r.pairs_too_short, r.ttft_paired_overhead_ms
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_constrained_request_is_the_plain_one_plus_the_schema() {
        let plain = request("m", "hi", 64, false);
        let constrained = request("m", "hi", 64, true);
        assert!(plain.get("response_format").is_none());
        let format = &constrained["response_format"];
        assert_eq!(format["type"], "json_schema");
        let schema = &format["json_schema"]["schema"];
        assert_eq!(schema["additionalProperties"], json!(false));
        assert_eq!(schema["properties"]["age"]["type"], "integer");
        assert!(schema["properties"]["traits"]["items"]["enum"].is_array());
        let mut without = constrained.clone();
        without.as_object_mut().unwrap().remove("response_format");
        assert_eq!(without, plain);
    }

    #[test]
    fn only_objects_of_the_schema_match() {
        assert!(matches_schema(
            r#"{"name": "Ada", "age": 7, "traits": ["kind", "shy"], "story": "..."}"#
        ));
        for bad in [
            r#"{"name": "Ada", "age": 7.5, "traits": [], "story": ""}"#,
            r#"{"name": "Ada", "age": 7, "traits": ["tall"], "story": ""}"#,
            r#"{"name": "Ada", "age": 7, "traits": [], "story": "", "x": 1}"#,
            r#"{"name": "Ada", "age": 7, "traits": []"#,
            r#"{"name": "Ada", "age": 7, "traits": ["kind", "kind", "kind", "kind", "kind"], "story": ""}"#,
            "Ada is seven.",
        ] {
            assert!(!matches_schema(bad), "{bad}");
        }
    }

    fn timing(tokens: u32, decode_ms: u64, ttft_ms: u64) -> RequestTiming {
        RequestTiming {
            ttft: Duration::from_millis(ttft_ms),
            decode: Duration::from_millis(decode_ms),
            tokens,
            prompt_tokens: 0,
        }
    }

    #[test]
    fn shorter_constrained_replies_compare_by_rate_and_tiny_ones_are_left_out() {
        // Constrained: 41 tokens in 500 ms (80/s); unconstrained: 101 in
        // 1000 ms (100/s): 0.8 whatever the lengths.
        let pair = (timing(41, 500, 60), timing(101, 1000, 50));
        let tiny = (timing(3, 20, 60), timing(101, 1000, 50));
        let report = summarise(&[pair, pair, tiny], 2);
        assert_eq!(report.pairs, 3);
        assert_eq!(report.pairs_too_short, 1);
        assert_eq!(report.decode_paired.n, 2);
        assert!((report.decode_paired.p50 - 0.8).abs() < 1e-9, "{report:?}");
        assert!((report.ttft_paired_overhead_ms - 10.0).abs() < 1e-9);
        assert_eq!(report.constrained_valid, 2);
    }
}
