//! `logit_bias`: OpenAI's map of token id (as a string) to a bias in
//! [-100, 100], added to that token's logit before sampling.
//!
//! A bias of -100 bans the token, as OpenAI documents: the node sends it as
//! [`BAN`], far below any real logit, so the token is never picked, not
//! merely unlikely.

use super::ApiError;
use serde_json::Value;

/// The most entries one request may bias (OpenAI allows 300).
pub const MAX_ENTRIES: usize = 1024;

/// The bias the node adds to a banned token's logit: low enough that no
/// logit survives it, finite so that a step whose every token is banned
/// still has a distribution to sample from.
pub const BAN: f32 = -1.0e30;

/// The biases `value` asks for, as (token id, bias) pairs sorted by id.
pub fn parse(value: Option<&Value>) -> Result<Vec<(u32, f32)>, ApiError> {
    let map = match value {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Object(map)) => map,
        Some(_) => return Err(ApiError::param(
            "logit_bias",
            "`logit_bias` must be an object mapping token ids to biases, such as {\"1234\": -100}",
        )),
    };
    if map.len() > MAX_ENTRIES {
        return Err(ApiError::param(
            "logit_bias",
            format!(
                "`logit_bias` has {} entries; give at most {MAX_ENTRIES}",
                map.len()
            ),
        ));
    }
    let mut biases = Vec::with_capacity(map.len());
    for (key, bias) in map {
        let id = key.trim().parse::<u32>().map_err(|_| {
            ApiError::param(
                "logit_bias",
                format!("`logit_bias` key {key:?} is not a token id; keys are token ids as strings, such as \"1234\""),
            )
        })?;
        let bias = match bias.as_f64() {
            Some(b) if (-100.0..=100.0).contains(&b) => b as f32,
            _ => {
                return Err(ApiError::param(
                    "logit_bias",
                    format!("`logit_bias` for token {id} must be a number between -100 and 100 (got {bias})"),
                ))
            }
        };
        biases.push((id, if bias <= -100.0 { BAN } else { bias }));
    }
    biases.sort_by_key(|&(id, _)| id);
    Ok(biases)
}

/// Refuses token ids outside the model's vocabulary of `vocab_size`.
pub fn check_vocab(biases: &[(u32, f32)], vocab_size: u32) -> Result<(), ApiError> {
    match biases.iter().find(|&&(id, _)| id >= vocab_size) {
        Some((id, _)) => Err(ApiError::param(
            "logit_bias",
            format!(
                "`logit_bias` names token {id}, but this model's token ids go from 0 to {}",
                vocab_size.saturating_sub(1)
            ),
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn message(value: Value) -> String {
        match parse(Some(&value)) {
            Err(ApiError::InvalidParam { param, message }) => {
                assert_eq!(param, "logit_bias");
                message
            }
            other => panic!("{value} gave {other:?}"),
        }
    }

    #[test]
    fn biases_are_read_sorted_and_minus_100_bans() {
        let biases = parse(Some(&json!({"42": 5, "7": -100, "9": -2.5}))).ok();
        assert_eq!(biases, Some(vec![(7, BAN), (9, -2.5), (42, 5.0)]));
        assert_eq!(parse(None).ok(), Some(Vec::new()));
        assert_eq!(parse(Some(&json!({}))).ok(), Some(Vec::new()));
    }

    #[test]
    fn bad_biases_name_the_entry() {
        assert_eq!(
            message(json!({"hello": 1})),
            "`logit_bias` key \"hello\" is not a token id; keys are token ids as strings, such as \"1234\""
        );
        assert_eq!(
            message(json!({"3": 101})),
            "`logit_bias` for token 3 must be a number between -100 and 100 (got 101)"
        );
        assert_eq!(
            message(json!([1, 2])),
            "`logit_bias` must be an object mapping token ids to biases, such as {\"1234\": -100}"
        );
    }

    #[test]
    fn a_token_outside_the_vocabulary_is_refused() {
        assert!(check_vocab(&[(9, 1.0)], 10).is_ok());
        match check_vocab(&[(10, 1.0)], 10) {
            Err(ApiError::InvalidParam { message, .. }) => assert_eq!(
                message,
                "`logit_bias` names token 10, but this model's token ids go from 0 to 9"
            ),
            other => panic!("{other:?}"),
        }
    }
}
