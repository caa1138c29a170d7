//! Ollama's `options`, `format` and `think`, mapped onto the
//! fields of the OpenAI request that the one generation path reads.

use super::super::types::CompletionRequest;
use super::super::ApiError;
use serde::Deserialize;
use serde_json::{json, Value};

/// `options`: the sampling and length settings superfluid honours. Any
/// other key (`num_gpu`, `mirostat`, ...) is refused naming it, since the
/// node would not do what it asks.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Options {
    /// Sampling temperature in [0, 2].
    pub temperature: Option<f64>,
    /// Nucleus sampling mass in (0, 1].
    pub top_p: Option<f64>,
    /// Keep the k most likely tokens; 0 disables it.
    pub top_k: Option<i64>,
    /// Minimum probability relative to the most likely token.
    pub min_p: Option<f64>,
    /// Seed of the random choice.
    pub seed: Option<i64>,
    /// The most tokens to generate; -1 and -2 for no limit but the context.
    pub num_predict: Option<i64>,
    /// Stop strings.
    pub stop: Option<Value>,
    /// Multiplicative penalty on recent tokens.
    pub repeat_penalty: Option<f64>,
    /// How many recent tokens the penalties look at.
    pub repeat_last_n: Option<i64>,
    /// Additive penalty on seen tokens.
    pub presence_penalty: Option<f64>,
    /// Additive penalty per occurrence.
    pub frequency_penalty: Option<f64>,
    /// The context the request may use: honoured as a limit on prompt and
    /// answer together, up to the nodes' own context.
    pub num_ctx: Option<i64>,
}

/// The OpenAI parameter each option is checked as, and the option's name.
const RENAMED: [(&str, &str); 9] = [
    ("temperature", "options.temperature"),
    ("top_p", "options.top_p"),
    ("top_k", "options.top_k"),
    ("min_p", "options.min_p"),
    ("max_tokens", "options.num_predict"),
    ("stop", "options.stop"),
    ("repetition_penalty", "options.repeat_penalty"),
    ("presence_penalty", "options.presence_penalty"),
    ("frequency_penalty", "options.frequency_penalty"),
];

impl Options {
    /// Sets the fields of `req` these options stand for.
    pub fn apply(&self, req: &mut CompletionRequest) -> Result<(), ApiError> {
        req.temperature = self.temperature;
        req.top_p = self.top_p;
        req.top_k = self.top_k;
        req.min_p = self.min_p;
        req.seed = self.seed;
        req.stop = self.stop.clone();
        req.repetition_penalty = self.repeat_penalty;
        req.presence_penalty = self.presence_penalty;
        req.frequency_penalty = self.frequency_penalty;
        req.max_tokens = match self.num_predict {
            None | Some(-1) | Some(-2) => None,
            Some(n) if n > 0 => Some(n),
            Some(n) => {
                return Err(ApiError::param(
                    "options.num_predict",
                    format!("`options.num_predict` must be at least 1, or -1 for no limit but the context (got {n})"),
                ))
            }
        };
        Ok(())
    }

    /// `repeat_last_n`: how far back the penalties look (-1: the whole
    /// context, 0: off).
    pub fn penalty_last_n(&self, context: u32) -> Result<Option<u32>, ApiError> {
        match self.repeat_last_n {
            None => Ok(None),
            Some(-1) => Ok(Some(context)),
            Some(n) => u32::try_from(n).map(Some).map_err(|_| {
                ApiError::param(
                    "options.repeat_last_n",
                    format!("`options.repeat_last_n` must be -1 (the whole context), 0 (off) or a number of tokens (got {n})"),
                )
            }),
        }
    }

    /// The context limit the request asked for, checked against the
    /// nodes' context `served`.
    pub fn context(&self, served: u32) -> Result<u32, ApiError> {
        match self.num_ctx {
            None => Ok(served),
            Some(n) if n >= 1 && n <= i64::from(served) => Ok(n as u32),
            Some(n) => Err(ApiError::param(
                "options.num_ctx",
                format!("`options.num_ctx` must be between 1 and {served}, the context the nodes serving this model were started with (got {n}); leave it out, or start the nodes with a larger context"),
            )),
        }
    }
}

/// An error from the OpenAI checks, naming the Ollama field the client set.
pub fn rename(err: ApiError) -> ApiError {
    match err {
        ApiError::InvalidParam { param, message } => {
            let Some((_, ours)) = RENAMED.iter().find(|(openai, _)| *openai == param) else {
                let (param, message) = if param.starts_with("response_format") {
                    (
                        "format".to_owned(),
                        message.replace("response_format.json_schema.schema", "format"),
                    )
                } else {
                    (param, message)
                };
                return ApiError::InvalidParam { param, message };
            };
            let message = message.replace(&format!("`{param}`"), &format!("`{ours}`"));
            ApiError::InvalidParam {
                param: (*ours).to_owned(),
                message,
            }
        }
        other => other,
    }
}

/// `format`: `"json"` or a JSON schema, as the OpenAI `response_format`
/// that asks for the same.
pub fn response_format(format: Option<&Value>) -> Result<Option<Value>, ApiError> {
    match format {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::String(s)) if s == "json" => Ok(Some(json!({"type": "json_object"}))),
        Some(schema @ Value::Object(_)) => Ok(Some(json!({
            "type": "json_schema",
            "json_schema": {"name": "format", "schema": schema},
        }))),
        Some(other) => Err(ApiError::param(
            "format",
            format!("`format` must be \"json\" or a JSON schema object (got {other})"),
        )),
    }
}

/// `think`: no model here reasons in a separate channel; `false` is
/// accepted.
pub fn check_think(think: Option<&Value>) -> Result<(), ApiError> {
    match think {
        None | Some(Value::Null) | Some(Value::Bool(false)) => Ok(()),
        Some(_) => Err(ApiError::param(
            "think",
            "`think` is not supported: superfluid does not separate a model's reasoning from its answer; send the request without `think`",
        )),
    }
}

#[cfg(test)]
mod tests;
