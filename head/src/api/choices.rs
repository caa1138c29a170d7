//! `n` and the log-probability fields of the OpenAI endpoints: how many
//! choices to generate from one prompt, and whether each token's
//! log-probability (with how many alternatives) comes back.
//!
//! Chat takes `logprobs: true` and `top_logprobs` (0 to 20); the legacy
//! `/v1/completions` takes `logprobs` as the number of alternatives (0 to
//! 5). A value outside its range, or of the other endpoint's form, is a
//! 400 that names the field.

use super::fields::Endpoint;
use super::types::CompletionRequest;
use super::unsupported::asks;
use super::ApiError;
use serde_json::Value;
use superfluid_proto::MAX_TOP_LOGPROBS;

/// The most choices one request may ask for.
pub const MAX_N: u32 = 8;

/// The most alternatives the legacy `logprobs` integer may ask for.
pub const MAX_LEGACY_LOGPROBS: u8 = 5;

/// What a request asked for beyond one plain answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Choices {
    /// Choices to generate, 1 to [`MAX_N`].
    pub n: u32,
    /// `None`: no log probabilities; `Some(k)`: each token's, with its
    /// `k` most likely alternatives.
    pub logprobs: Option<u8>,
}

impl CompletionRequest {
    /// Reads `n`, `logprobs` and `top_logprobs` as `endpoint` takes them.
    pub fn choices(&self, endpoint: Endpoint) -> Result<Choices, ApiError> {
        let logprobs = match endpoint {
            Endpoint::Chat => chat(self.logprobs.as_ref(), self.top_logprobs.as_ref())?,
            Endpoint::Completions => {
                let logprobs = legacy(self.logprobs.as_ref(), self.top_logprobs.as_ref())?;
                if logprobs.is_some() && self.echo == Some(true) {
                    return Err(ApiError::param(
                        "echo",
                        "`echo` with `logprobs` would need the prompt tokens' log-probabilities, which this server does not compute; send the request without `echo` (the prompt is yours already) or without `logprobs`",
                    ));
                }
                logprobs
            }
        };
        Ok(Choices {
            n: n(self.n)?,
            logprobs,
        })
    }
}

/// `n`: 1 when absent.
pub fn n(value: Option<i64>) -> Result<u32, ApiError> {
    match value {
        None => Ok(1),
        Some(n) if (1..=i64::from(MAX_N)).contains(&n) => Ok(n as u32),
        Some(n) => Err(ApiError::param(
            "n",
            format!("`n` must be between 1 and {MAX_N} (got {n}); send several requests for more choices"),
        )),
    }
}

/// Chat's `logprobs` (a boolean) and `top_logprobs` (0 to 20).
fn chat(logprobs: Option<&Value>, top: Option<&Value>) -> Result<Option<u8>, ApiError> {
    let on = match logprobs {
        None | Some(Value::Null) => false,
        Some(Value::Bool(on)) => *on,
        Some(other) => {
            return Err(ApiError::param(
                "logprobs",
                format!("`logprobs` must be true or false on /v1/chat/completions (got {other}); ask for alternatives with `top_logprobs` (0 to {MAX_TOP_LOGPROBS})"),
            ))
        }
    };
    let top = match top {
        None | Some(Value::Null) => 0,
        Some(value) => count(value, MAX_TOP_LOGPROBS).ok_or_else(|| {
            ApiError::param(
                "top_logprobs",
                format!(
                    "`top_logprobs` must be an integer from 0 to {MAX_TOP_LOGPROBS} (got {value})"
                ),
            )
        })?,
    };
    if top > 0 && !on {
        return Err(ApiError::param(
            "top_logprobs",
            "`top_logprobs` needs `logprobs: true`; send both, or neither",
        ));
    }
    Ok(on.then_some(top))
}

/// The legacy `logprobs` (0 to 5 alternatives); `top_logprobs` is chat's.
fn legacy(logprobs: Option<&Value>, top: Option<&Value>) -> Result<Option<u8>, ApiError> {
    if asks(top) {
        return Err(ApiError::param(
            "top_logprobs",
            format!("`top_logprobs` is a /v1/chat/completions parameter; on /v1/completions give `logprobs` the number of alternatives (0 to {MAX_LEGACY_LOGPROBS})"),
        ));
    }
    match logprobs {
        None | Some(Value::Null) | Some(Value::Bool(false)) => Ok(None),
        Some(value) => count(value, MAX_LEGACY_LOGPROBS).map(Some).ok_or_else(|| {
            ApiError::param(
                "logprobs",
                format!("`logprobs` on /v1/completions is the number of alternatives per token, an integer from 0 to {MAX_LEGACY_LOGPROBS} (got {value})"),
            )
        }),
    }
}

/// An integer from 0 to `max`.
fn count(value: &Value, max: u8) -> Option<u8> {
    value
        .as_u64()
        .filter(|&k| k <= u64::from(max))
        .and_then(|k| u8::try_from(k).ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn choices(endpoint: Endpoint, body: Value) -> Result<Choices, (String, String)> {
        let req: CompletionRequest = serde_json::from_value(body).expect("a request body");
        req.choices(endpoint).map_err(|e| match e {
            ApiError::InvalidParam { param, message } => (param, message),
            other => panic!("unexpected error {other:?}"),
        })
    }

    #[test]
    fn chat_takes_a_boolean_and_up_to_twenty_alternatives() {
        let asked = |body| choices(Endpoint::Chat, body).map(|c| c.logprobs);
        assert_eq!(asked(json!({})), Ok(None));
        assert_eq!(
            asked(json!({"logprobs": false, "top_logprobs": 0})),
            Ok(None)
        );
        assert_eq!(asked(json!({"logprobs": true})), Ok(Some(0)));
        assert_eq!(
            asked(json!({"logprobs": true, "top_logprobs": 20})),
            Ok(Some(20))
        );
        for (body, field) in [
            (
                json!({"logprobs": true, "top_logprobs": 21}),
                "top_logprobs",
            ),
            (
                json!({"logprobs": true, "top_logprobs": -1}),
                "top_logprobs",
            ),
            (
                json!({"logprobs": true, "top_logprobs": 2.5}),
                "top_logprobs",
            ),
            (json!({"top_logprobs": 3}), "top_logprobs"),
            (json!({"logprobs": 3}), "logprobs"),
        ] {
            let (param, message) = asked(body.clone()).expect_err("refused");
            assert_eq!(param, field, "{body}");
            assert!(message.contains(field), "{message}");
        }
    }

    #[test]
    fn completions_take_an_integer_up_to_five() {
        let asked = |body| choices(Endpoint::Completions, body).map(|c| c.logprobs);
        assert_eq!(asked(json!({})), Ok(None));
        assert_eq!(asked(json!({"logprobs": null})), Ok(None));
        assert_eq!(asked(json!({"logprobs": 0})), Ok(Some(0)));
        assert_eq!(asked(json!({"logprobs": 5})), Ok(Some(5)));
        for (body, field) in [
            (json!({"logprobs": 6}), "logprobs"),
            (json!({"logprobs": true}), "logprobs"),
            (json!({"logprobs": 2, "top_logprobs": 2}), "top_logprobs"),
            (json!({"logprobs": 2, "echo": true}), "echo"),
        ] {
            let (param, _) = asked(body.clone()).expect_err("refused");
            assert_eq!(param, field, "{body}");
        }
    }

    #[test]
    fn n_is_one_to_eight() {
        let n = |body| choices(Endpoint::Chat, body).map(|c| c.n);
        assert_eq!(n(json!({})), Ok(1));
        assert_eq!(n(json!({"n": 8})), Ok(8));
        for bad in [0, 9, -1] {
            let (param, message) = n(json!({ "n": bad })).expect_err("refused");
            assert_eq!(param, "n");
            assert!(message.contains("between 1 and 8"), "{message}");
        }
    }
}
